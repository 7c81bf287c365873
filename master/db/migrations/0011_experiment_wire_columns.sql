-- What the experiment reads (GetExperiments, GetExperiment) send of an experiment's config is
-- kept beside it, computed by PostgreSQL whenever the config is written (generated columns: no
-- code path can forget them; this migration fills them for existing rows): the config's JSON
-- text, passed to the client as it is, whether it holds a secret to redact, and the searcher's
-- name and metric. A list then reads text instead of converting each config from jsonb.
ALTER TABLE experiments
    ADD COLUMN config_json text GENERATED ALWAYS AS (config::text) STORED,
    -- A registry_auth that may hold a secret is an object (its default is a JSON null);
    -- checkpoint storage credentials (S3, Azure) are hidden too (expconf.redact).
    ADD COLUMN config_secret boolean GENERATED ALWAYS AS (
        coalesce(jsonb_typeof(config->'environment'->'registry_auth') = 'object'
            OR jsonb_typeof(config->'checkpoint_storage') = 'object' AND config->'checkpoint_storage'
                ?| array['access_key', 'secret_key', 'connection_string', 'credential'], false)
    ) STORED,
    ADD COLUMN searcher_name text GENERATED ALWAYS AS (config->'searcher'->>'name') STORED,
    ADD COLUMN searcher_metric_name text
        GENERATED ALWAYS AS (config->'searcher'->>'metric') STORED;

-- The list's total counts the live experiments from this index alone (an index-only scan of a
-- few pages instead of every heap page, each row carrying its config twice), also under the
-- list's common filters.
CREATE INDEX experiments_live ON experiments (project_id, archived) INCLUDE (state, owner_id, id)
    WHERE NOT deleted;
