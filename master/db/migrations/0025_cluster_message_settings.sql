-- The cluster-wide message (Determined's SetClusterMessage): at most one, shown between its
-- start and end (no end: until cleared).
CREATE TABLE cluster_message (
    singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    message      text NOT NULL,
    start_time   timestamptz NOT NULL,
    end_time     timestamptz,
    created_time timestamptz NOT NULL DEFAULT now(),
    CHECK (end_time IS NULL OR end_time > start_time)
);

-- Master settings changed at run time (PatchMasterConfig), shared by every master process on
-- this database; each process polls ``version`` and applies what changed.
CREATE TABLE master_settings (
    key        text PRIMARY KEY,
    value      jsonb NOT NULL,
    version    bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
