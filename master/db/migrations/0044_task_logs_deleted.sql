-- When log retention (det.master.services.log_retention) deleted a task's logs, so the logs
-- APIs can say why a task has none (the X-Det-Logs-Deleted header) rather than answer an empty
-- stream. One row per task whose logs a run deleted; a later run that deletes lines again
-- (shipped after the first) moves the time on.
CREATE TABLE task_logs_deleted (
    task_id     text PRIMARY KEY,
    deleted_at  timestamptz NOT NULL
);
