-- Until when someone reads a live allocation's logs (det.master.services.task_logs.watch): the
-- heartbeat answer marks its container `logsWatched`, and the agent ships its lines within a
-- quarter of a second instead of batching them for seconds (det.agent.logs.LogShipper).
ALTER TABLE allocations ADD COLUMN logs_watched_until timestamptz;

-- A watch that begins (none before, or the last one over) wakes the allocation's agents as new
-- work does (migration 0033): the agent heartbeats now and learns of it from the answer. A
-- watch renewed while it lasts wakes no one.
CREATE TRIGGER allocations_logs_watched
    AFTER UPDATE OF logs_watched_until ON allocations
    FOR EACH ROW
    WHEN (NEW.logs_watched_until IS NOT NULL
          AND (OLD.logs_watched_until IS NULL OR OLD.logs_watched_until <= now()))
    EXECUTE FUNCTION det_agent_work_changed();
