-- det schema, version 1.

CREATE TABLE cluster (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    cluster_id  text NOT NULL,
    agent_token text NOT NULL,
    -- Allocation tokens are HMAC(token_secret, allocation id): any master process can re-derive them.
    token_secret text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE users (
    id            serial PRIMARY KEY,
    username      text NOT NULL UNIQUE,
    display_name  text,
    password_hash text NOT NULL,
    admin         boolean NOT NULL DEFAULT false,
    active        boolean NOT NULL DEFAULT true,
    remote        boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    modified_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE user_sessions (
    id          bigserial PRIMARY KEY,
    user_id     int NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    token_hash  text NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);

CREATE TABLE experiments (
    id               serial PRIMARY KEY,
    name             text NOT NULL,
    description      text NOT NULL DEFAULT '',
    labels           jsonb NOT NULL DEFAULT '[]',
    notes            text NOT NULL DEFAULT '',
    config           jsonb NOT NULL,
    original_config  text NOT NULL,
    state            text NOT NULL,
    archived         boolean NOT NULL DEFAULT false,
    owner_id         int NOT NULL REFERENCES users(id),
    project_id       int NOT NULL DEFAULT 1,
    context          bytea,
    searcher_state   jsonb,
    progress         double precision NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    ended_at         timestamptz,
    deleted          boolean NOT NULL DEFAULT false
);
CREATE INDEX experiments_state ON experiments (state);

-- One job per experiment (Determined's job queue); queue_key orders jobs of equal priority.
CREATE TABLE jobs (
    id             text PRIMARY KEY,
    kind           text NOT NULL DEFAULT 'EXPERIMENT',
    experiment_id  int UNIQUE REFERENCES experiments(id) ON DELETE CASCADE,
    owner_id       int NOT NULL REFERENCES users(id),
    resource_pool  text NOT NULL,
    priority       int NOT NULL,
    weight         double precision NOT NULL DEFAULT 1,
    queue_key      double precision NOT NULL,
    submitted_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE trials (
    id                 serial PRIMARY KEY,
    experiment_id      int NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
    request_id         text NOT NULL,
    task_id            text NOT NULL UNIQUE,
    hparams            jsonb NOT NULL,
    seed               bigint NOT NULL,
    state              text NOT NULL,
    restarts           int NOT NULL DEFAULT 0,
    run_id             int NOT NULL DEFAULT 0,
    -- Why the trial should wind down, if it should: a searcher stop, pause, cancel or kill.
    stop_reason        text,
    steps_completed    bigint NOT NULL DEFAULT 0,
    latest_checkpoint  uuid,
    searcher_metric    double precision,
    summary_metrics    jsonb NOT NULL DEFAULT '{}',
    best_validation_id bigint,
    exit_reason        text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    started_at         timestamptz,
    ended_at           timestamptz,
    UNIQUE (experiment_id, request_id)
);
CREATE INDEX trials_experiment ON trials (experiment_id);
CREATE INDEX trials_state ON trials (state);

-- Events the searcher has yet to see; consumed exactly once by the searcher pass.
CREATE TABLE searcher_events (
    id             bigserial PRIMARY KEY,
    experiment_id  int NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
    kind           text NOT NULL,
    request_id     text NOT NULL,
    payload        jsonb NOT NULL DEFAULT '{}',
    processed      boolean NOT NULL DEFAULT false,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX searcher_events_pending ON searcher_events (experiment_id, id) WHERE NOT processed;

CREATE TABLE agents (
    id                 text PRIMARY KEY,
    resource_pool      text NOT NULL,
    version            text NOT NULL DEFAULT '',
    labels             jsonb NOT NULL DEFAULT '{}',
    addresses          jsonb NOT NULL DEFAULT '[]',
    enabled            boolean NOT NULL DEFAULT true,
    draining           boolean NOT NULL DEFAULT false,
    preemption_notice  jsonb,
    registered_at      timestamptz NOT NULL DEFAULT now(),
    last_heartbeat     timestamptz NOT NULL DEFAULT now(),
    connected          boolean NOT NULL DEFAULT true
);

CREATE TABLE slots (
    agent_id   text NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    slot_id    text NOT NULL,
    type       text NOT NULL,
    uuid       text,
    brand      text NOT NULL DEFAULT '',
    memory_mb  bigint NOT NULL DEFAULT 0,
    enabled    boolean NOT NULL DEFAULT true,
    PRIMARY KEY (agent_id, slot_id)
);

CREATE TABLE allocations (
    id                 text PRIMARY KEY,
    task_id            text NOT NULL,
    trial_id           int REFERENCES trials(id) ON DELETE CASCADE,
    job_id             text NOT NULL,
    resource_pool      text NOT NULL,
    slots_needed       int NOT NULL,
    state              text NOT NULL,
    -- {agent id: [slot ids]} once placed.
    placement          jsonb,
    token_hash         text NOT NULL,
    preempt_requested  boolean NOT NULL DEFAULT false,
    preempt_acked      boolean NOT NULL DEFAULT false,
    kill_requested     boolean NOT NULL DEFAULT false,
    container_id       text,
    exit_code          int,
    exit_reason        text,
    -- Whether this allocation's end counts as a restart of the trial.
    counts_as_restart  boolean,
    created_at         timestamptz NOT NULL DEFAULT now(),
    placed_at          timestamptz,
    started_at         timestamptz,
    ended_at           timestamptz
);
CREATE INDEX allocations_live ON allocations (state) WHERE state <> 'TERMINATED';
CREATE INDEX allocations_trial ON allocations (trial_id);

CREATE TABLE metrics (
    id               bigserial PRIMARY KEY,
    trial_id         int NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    trial_run_id     int NOT NULL DEFAULT 0,
    metric_group     text NOT NULL,
    total_batches    bigint NOT NULL,
    metrics          jsonb NOT NULL,
    reported_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX metrics_trial_group ON metrics (trial_id, metric_group, total_batches);

CREATE TABLE checkpoints (
    uuid             uuid PRIMARY KEY,
    trial_id         int REFERENCES trials(id) ON DELETE CASCADE,
    task_id          text,
    allocation_id    text,
    state            text NOT NULL DEFAULT 'COMPLETED',
    report_time      timestamptz NOT NULL DEFAULT now(),
    resources        jsonb NOT NULL DEFAULT '{}',
    metadata         jsonb NOT NULL DEFAULT '{}',
    steps_completed  bigint NOT NULL DEFAULT 0,
    size             bigint NOT NULL DEFAULT 0,
    storage          jsonb
);
CREATE INDEX checkpoints_trial ON checkpoints (trial_id);

CREATE TABLE task_logs (
    id             bigserial PRIMARY KEY,
    task_id        text NOT NULL,
    allocation_id  text,
    agent_id       text,
    container_id   text,
    rank_id        int,
    log            text NOT NULL,
    level          text,
    stdtype        text,
    source         text,
    timestamp      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX task_logs_task ON task_logs (task_id, id);

CREATE TABLE models (
    id           serial PRIMARY KEY,
    name         text NOT NULL UNIQUE,
    description  text NOT NULL DEFAULT '',
    metadata     jsonb NOT NULL DEFAULT '{}',
    labels       jsonb NOT NULL DEFAULT '[]',
    notes        text NOT NULL DEFAULT '',
    archived     boolean NOT NULL DEFAULT false,
    owner_id     int NOT NULL REFERENCES users(id),
    created_at   timestamptz NOT NULL DEFAULT now(),
    modified_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE model_versions (
    id               serial PRIMARY KEY,
    model_id         int NOT NULL REFERENCES models(id) ON DELETE CASCADE,
    version          int NOT NULL,
    checkpoint_uuid  uuid NOT NULL REFERENCES checkpoints(uuid),
    name             text NOT NULL DEFAULT '',
    comment          text NOT NULL DEFAULT '',
    metadata         jsonb NOT NULL DEFAULT '{}',
    labels           jsonb NOT NULL DEFAULT '[]',
    notes            text NOT NULL DEFAULT '',
    owner_id         int NOT NULL REFERENCES users(id),
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (model_id, version)
);

-- Cloud instances the provisioner launched, and what went wrong launching them.
CREATE TABLE instances (
    id             text PRIMARY KEY,
    resource_pool  text NOT NULL,
    instance_type  text NOT NULL,
    zone           text,
    market         text NOT NULL,
    state          text NOT NULL,
    launched_at    timestamptz NOT NULL,
    terminated_at  timestamptz,
    reason         text
);

CREATE TABLE launch_errors (
    id             bigserial PRIMARY KEY,
    resource_pool  text NOT NULL,
    option_index   int NOT NULL,
    code           text NOT NULL,
    message        text NOT NULL,
    capacity       boolean NOT NULL,
    at             timestamptz NOT NULL DEFAULT now()
);

-- What happened and why: state transitions, scheduling and provisioning decisions.
CREATE TABLE events (
    id          bigserial PRIMARY KEY,
    entity      text NOT NULL,     -- 'experiment', 'trial', 'allocation', 'job', 'pool', 'agent'
    entity_id   text NOT NULL,
    kind        text NOT NULL,
    message     text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_entity ON events (entity, entity_id, id);
