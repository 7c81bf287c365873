-- Wake-ups the control loop asked a scheduler for (det.master.wakeups): one row per time, so
-- every master process asks once for each time, across restarts and instances.
CREATE TABLE wakeups (
    at timestamptz PRIMARY KEY,
    requested_at timestamptz NOT NULL DEFAULT now()
);
