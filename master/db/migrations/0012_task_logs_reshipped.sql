-- An agent that restarts re-ships a container's lines from its last saved cursor; a post the
-- master committed just before the agent died (its cursor not yet saved) arrives twice. The
-- log route skips a container line it already holds (same container, Docker timestamp and
-- text); this index makes that lookup one probe.
CREATE INDEX task_logs_container_ts ON task_logs (container_id, timestamp)
    WHERE container_id IS NOT NULL;
