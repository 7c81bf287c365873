-- Log retention (Determined's retention_policy, det e|trial set log-retention, det task
-- cleanup-logs): a trial's own retention in days (NULL: the master's retention_policy; -1:
-- forever), and when the scheduled cleanup last ran (one row).
ALTER TABLE trials ADD COLUMN log_retention_days int;
CREATE TABLE log_retention_runs (
    id           int PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    last_run_at  timestamptz NOT NULL
);
-- Finding the tasks whose logs expired reads each task's allocations.
CREATE INDEX IF NOT EXISTS allocations_task ON allocations (task_id);
