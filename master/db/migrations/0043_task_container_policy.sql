-- The cluster's task container policy set by admins at run time (issue 41;
-- det.master.services.task_container_policy). master.yaml's task_container_policy is the value
-- until an admin stores one; from then on the stored value is the cluster's policy (pools'
-- own task_container_policy in master.yaml still override it key by key).
--
-- task_container_policy holds the current value: at most one row. Every change also appends a
-- row to task_container_policy_changes, the audit: who, when, the value before and after. The
-- changes are append-only (a trigger refuses UPDATE and DELETE), and name the user by id and
-- username as they were, with no foreign key, so no change to users rewrites the audit.
CREATE TABLE task_container_policy_changes (
    id             bigserial PRIMARY KEY,
    changed_at     timestamptz NOT NULL DEFAULT now(),
    user_id        int NOT NULL,
    username       text NOT NULL,
    -- Where the value before came from: the master.yaml of the master that took the change
    -- (nothing was stored yet) or the database.
    source_before  text NOT NULL CHECK (source_before IN ('master.yaml', 'database')),
    policy_before  jsonb NOT NULL,
    policy_after   jsonb NOT NULL
);

CREATE TABLE task_container_policy (
    one        boolean PRIMARY KEY DEFAULT true CHECK (one),
    policy     jsonb NOT NULL,
    -- The change that set it (its time and author are that row's).
    change_id  bigint NOT NULL REFERENCES task_container_policy_changes (id)
);

CREATE FUNCTION task_container_policy_changes_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'task_container_policy_changes is append-only (the audit of the policy)';
END $$;

CREATE TRIGGER task_container_policy_changes_append_only
    BEFORE UPDATE OR DELETE ON task_container_policy_changes
    FOR EACH ROW EXECUTE FUNCTION task_container_policy_changes_append_only();
