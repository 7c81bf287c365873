-- Interactive tasks beside trials: commands, notebooks, shells and TensorBoards (Determined's
-- "NTSC" tasks). Each is a job of its own (jobs.kind names the type, no experiment) whose runs
-- are allocations like a trial's (allocations.task_id = ntsc_tasks.id, trial_id NULL).
CREATE TABLE ntsc_tasks (
    id             text PRIMARY KEY,
    kind           text NOT NULL CHECK (kind IN ('COMMAND', 'NOTEBOOK', 'SHELL', 'TENSORBOARD')),
    owner_id       int NOT NULL REFERENCES users(id),
    workspace_id   int NOT NULL DEFAULT 1 REFERENCES workspaces(id),
    job_id         text NOT NULL REFERENCES jobs(id),
    description    text NOT NULL DEFAULT '',
    -- The resolved task config (Determined's command/notebook/shell/tensorboard config).
    config         jsonb NOT NULL,
    context        bytea,
    -- Type-specific data: a shell's key pair, a TensorBoard's experiment and trial ids.
    data           jsonb NOT NULL DEFAULT '{}',
    -- ACTIVE until it ends, then TERMINATED (states.TASK_TRANSITIONS).
    state          text NOT NULL DEFAULT 'ACTIVE',
    run_id         int NOT NULL DEFAULT 0,
    exit_code      int,
    exit_status    text,
    -- host:port of the task's service once its container is ready (agents report it).
    proxy_address  text,
    -- The last time a user reached the task through the proxy (the idle timeout's clock).
    last_activity  timestamptz NOT NULL DEFAULT now(),
    created_at     timestamptz NOT NULL DEFAULT now(),
    ended_at       timestamptz
);
CREATE INDEX ntsc_tasks_live ON ntsc_tasks (kind) WHERE state <> 'TERMINATED';
CREATE INDEX ntsc_tasks_owner ON ntsc_tasks (owner_id, kind);
