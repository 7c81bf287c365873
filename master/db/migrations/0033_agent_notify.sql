-- An allocation placed on agents (state turns ASSIGNED) or to be killed (kill_requested turns
-- true) notifies det_agent with each agent's id: an agent waiting in GET
-- /api/v1/agents/<id>/changes (det.master.preemptwait) heartbeats at once instead of at its next
-- tick. A trigger, so that no path that places or kills can forget to.
CREATE FUNCTION det_agent_work_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF jsonb_typeof(NEW.placement) = 'object' THEN
        PERFORM pg_notify('det_agent', agent) FROM jsonb_object_keys(NEW.placement) AS agent;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER allocations_agent_work_changed
    AFTER UPDATE OF state, kill_requested ON allocations
    FOR EACH ROW
    WHEN ((NEW.state = 'ASSIGNED' AND OLD.state IS DISTINCT FROM 'ASSIGNED')
          OR (NEW.kill_requested AND NOT OLD.kill_requested))
    EXECUTE FUNCTION det_agent_work_changed();
