-- Resource pools bound to workspaces (det resource-pool bindings; Determined's
-- /api/v1/resource-pools/{name}/workspace-bindings): a pool with no row here is shared by every
-- workspace; a pool with rows is for those workspaces only.
CREATE TABLE pool_workspace_bindings (
    pool          text NOT NULL,
    workspace_id  int NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    PRIMARY KEY (pool, workspace_id)
);
CREATE INDEX pool_workspace_bindings_workspace ON pool_workspace_bindings (workspace_id);
