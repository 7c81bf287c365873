-- Workspaces as teams (issue 40): user groups and role assignments. What each role may do is a
-- table in code (det.master.authz), not rows: only who holds which role where is stored here.
--
-- No row is written for existing clusters: every workspace starts open (every user is
-- implicitly its Editor), which keeps every right a user had before this migration, plus the
-- Editors' shared control (docs/security.md, "Roles"). A workspace turns private at its first
-- role assignment and stays so (removing the last assignment does not open it to everyone).
CREATE TABLE user_groups (
    id          serial PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE user_group_members (
    group_id  int NOT NULL REFERENCES user_groups (id) ON DELETE CASCADE,
    user_id   int NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    PRIMARY KEY (group_id, user_id)
);
CREATE INDEX user_group_members_user ON user_group_members (user_id);

-- One role held by one user or one group, on one workspace or (workspace_id NULL) the cluster.
-- ClusterAdmin is users.admin itself (det.master.services.rbac): no row is written for it.
CREATE TABLE role_assignments (
    id            serial PRIMARY KEY,
    role          text NOT NULL CHECK (role IN ('Viewer', 'Editor', 'WorkspaceAdmin', 'ClusterAdmin')),
    user_id       int REFERENCES users (id) ON DELETE CASCADE,
    group_id      int REFERENCES user_groups (id) ON DELETE CASCADE,
    workspace_id  int REFERENCES workspaces (id) ON DELETE CASCADE,
    created_at    timestamptz NOT NULL DEFAULT now(),
    CHECK ((user_id IS NULL) <> (group_id IS NULL))
);
CREATE UNIQUE INDEX role_assignments_once ON role_assignments
    (role, coalesce(user_id, 0), coalesce(group_id, 0), coalesce(workspace_id, 0));
CREATE INDEX role_assignments_workspace ON role_assignments (workspace_id);

ALTER TABLE workspaces ADD COLUMN private boolean NOT NULL DEFAULT false;
