-- Workspaces and projects (Determined's open-source edition): every experiment lives in a
-- project, every project in a workspace. The defaults, both named "Uncategorized", have id 1
-- (experiments already carry project_id 1) and cannot be renamed, archived, moved or deleted.
-- A default's owner is NULL: it is shown as the first admin's (user id 1).
CREATE TABLE workspaces (
    id                    serial PRIMARY KEY,
    name                  text NOT NULL UNIQUE,
    archived              boolean NOT NULL DEFAULT false,
    immutable             boolean NOT NULL DEFAULT false,
    owner_id              int REFERENCES users(id),
    default_compute_pool  text NOT NULL DEFAULT '',
    default_aux_pool      text NOT NULL DEFAULT '',
    checkpoint_storage    jsonb,
    agent_user_group      jsonb,
    created_at            timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE projects (
    id            serial PRIMARY KEY,
    workspace_id  int NOT NULL REFERENCES workspaces(id),
    name          text NOT NULL,
    key           text NOT NULL UNIQUE,
    description   text NOT NULL DEFAULT '',
    notes         jsonb NOT NULL DEFAULT '[]',
    archived      boolean NOT NULL DEFAULT false,
    immutable     boolean NOT NULL DEFAULT false,
    owner_id      int REFERENCES users(id),
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workspace_id, name)
);

INSERT INTO workspaces (id, name, immutable) VALUES (1, 'Uncategorized', true);
INSERT INTO projects (id, workspace_id, name, key, immutable)
    VALUES (1, 1, 'Uncategorized', 'UNCAT', true);
SELECT setval('workspaces_id_seq', 1);
SELECT setval('projects_id_seq', 1);

-- Deleted experiments keep their rows (checkpoint GC) after their project is gone, so there
-- is no foreign key from experiments.project_id.
CREATE INDEX experiments_project ON experiments (project_id);

ALTER TABLE models ADD COLUMN workspace_id int NOT NULL DEFAULT 1 REFERENCES workspaces(id);

-- Configuration templates (Determined's v1 templates API): a config merged under an
-- experiment's own config at creation; the expanded config is what the experiment stores.
CREATE TABLE templates (
    name          text PRIMARY KEY,
    config        jsonb NOT NULL,
    workspace_id  int NOT NULL DEFAULT 1 REFERENCES workspaces(id),
    owner_id      int REFERENCES users(id),
    created_at    timestamptz NOT NULL DEFAULT now()
);
