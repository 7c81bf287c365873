-- Webhooks (Determined's open-source edition): a webhook has triggers; matching events are
-- queued in webhook_events (in the transaction that caused them) and delivered by a thread of
-- the loop's leader outside any transaction (det.master.services.webhook_delivery).
CREATE TABLE webhooks (
    id serial PRIMARY KEY,
    name text NOT NULL,
    url text NOT NULL,
    webhook_type text NOT NULL,          -- DEFAULT | SLACK
    mode text NOT NULL DEFAULT 'WORKSPACE',  -- WORKSPACE | SPECIFIC
    workspace_id int REFERENCES workspaces (id) ON DELETE CASCADE,  -- NULL: global
    created_by int REFERENCES users (id),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE webhook_triggers (
    id serial PRIMARY KEY,
    webhook_id int NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    trigger_type text NOT NULL,          -- EXPERIMENT_STATE_CHANGE | TASK_LOG | CUSTOM
    condition jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX webhook_triggers_type ON webhook_triggers (trigger_type);

-- A task-log trigger fires once per task.
CREATE TABLE webhook_task_log_fired (
    task_id text NOT NULL,
    trigger_id int NOT NULL REFERENCES webhook_triggers (id) ON DELETE CASCADE,
    PRIMARY KEY (task_id, trigger_id)
);

-- The delivery queue. A row stays after delivery (delivered_at set) as the record of its last
-- status; attempts and last_status/last_error say what happened.
CREATE TABLE webhook_events (
    id bigserial PRIMARY KEY,
    webhook_id int REFERENCES webhooks (id) ON DELETE SET NULL,
    url text NOT NULL,
    webhook_type text NOT NULL,
    payload text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    attempts int NOT NULL DEFAULT 0,
    last_status int,
    last_error text,
    last_attempt_at timestamptz,
    delivered_at timestamptz,
    failed_at timestamptz
);
CREATE INDEX webhook_events_due ON webhook_events (next_attempt_at)
    WHERE delivered_at IS NULL AND failed_at IS NULL;
