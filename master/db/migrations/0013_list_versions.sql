-- A version of what a list shows, moved by every committed change to it (det.master.listcache):
-- an API process keeps a rendered page of the experiment list under the version it read before
-- building the page, and serves it again while a one-row read finds the same version.
--
-- The version is the id of the last transaction that changed what the list shows
-- (pg_current_xact_id(): never the same for two transactions), written by that transaction
-- itself, so it becomes visible exactly when the change does (a sequence would not: its value
-- is visible before the change commits). The triggers that write it are deferred constraint
-- triggers, so the row is locked only while the changing transaction commits: it is the last
-- lock such a transaction takes, which cannot close a cycle with the locks it took before.
-- Their WHEN clauses are evaluated when the row changes, so an update of columns the list does
-- not show (a searcher's state, a trial's metrics, a job's queue position) queues nothing.
CREATE TABLE list_versions (
    name text PRIMARY KEY,
    version xid8 NOT NULL
);
INSERT INTO list_versions VALUES ('experiments', pg_current_xact_id());

CREATE FUNCTION det_experiment_list_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Once per transaction: later calls find their own id and write nothing.
    UPDATE list_versions SET version = pg_current_xact_id()
        WHERE name = 'experiments' AND version <> pg_current_xact_id();
    RETURN NULL;
END $$;

-- The experiment's own columns that GetExperiments sends or filters on (its config's wire
-- columns are generated from config).
CREATE CONSTRAINT TRIGGER experiments_list_changed
    AFTER UPDATE OF name, description, labels, notes, config, state, archived, owner_id,
        project_id, progress, created_at, ended_at, deleted
    ON experiments DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN ((OLD.name, OLD.description, OLD.notes, OLD.state, OLD.archived, OLD.owner_id,
           OLD.project_id, OLD.progress, OLD.created_at, OLD.ended_at, OLD.deleted)
          IS DISTINCT FROM
          (NEW.name, NEW.description, NEW.notes, NEW.state, NEW.archived, NEW.owner_id,
           NEW.project_id, NEW.progress, NEW.created_at, NEW.ended_at, NEW.deleted)
          OR OLD.labels IS DISTINCT FROM NEW.labels OR OLD.config IS DISTINCT FROM NEW.config)
    EXECUTE FUNCTION det_experiment_list_changed();
CREATE CONSTRAINT TRIGGER experiments_list_added
    AFTER INSERT OR DELETE ON experiments DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    EXECUTE FUNCTION det_experiment_list_changed();

-- numTrials: a trial added or removed (a trial's own updates are not shown).
CREATE CONSTRAINT TRIGGER trials_list_added
    AFTER INSERT OR DELETE ON trials DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    EXECUTE FUNCTION det_experiment_list_changed();
CREATE CONSTRAINT TRIGGER trials_list_moved
    AFTER UPDATE OF experiment_id ON trials DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.experiment_id IS DISTINCT FROM NEW.experiment_id)
    EXECUTE FUNCTION det_experiment_list_changed();

-- jobId and resourcePool (an experiment's job).
CREATE CONSTRAINT TRIGGER jobs_list_added
    AFTER INSERT OR DELETE ON jobs DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    EXECUTE FUNCTION det_experiment_list_changed();
CREATE CONSTRAINT TRIGGER jobs_list_changed
    AFTER UPDATE OF id, experiment_id, resource_pool ON jobs
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN ((OLD.id, OLD.experiment_id, OLD.resource_pool)
          IS DISTINCT FROM (NEW.id, NEW.experiment_id, NEW.resource_pool))
    EXECUTE FUNCTION det_experiment_list_changed();

-- username and displayName (the owner's name; the users filter reads it too).
CREATE CONSTRAINT TRIGGER users_list_changed
    AFTER UPDATE OF id, username ON users DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN ((OLD.id, OLD.username) IS DISTINCT FROM (NEW.id, NEW.username))
    EXECUTE FUNCTION det_experiment_list_changed();
CREATE CONSTRAINT TRIGGER users_list_removed
    AFTER DELETE ON users DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    EXECUTE FUNCTION det_experiment_list_changed();

-- projectName, projectOwnerId, workspaceId, workspaceName, parentArchived. A project is added
-- too: experiments keep the id of a deleted project (no foreign key).
CREATE CONSTRAINT TRIGGER projects_list_added
    AFTER INSERT OR DELETE ON projects DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    EXECUTE FUNCTION det_experiment_list_changed();
CREATE CONSTRAINT TRIGGER projects_list_changed
    AFTER UPDATE OF id, name, owner_id, workspace_id, archived ON projects
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN ((OLD.id, OLD.name, OLD.owner_id, OLD.workspace_id, OLD.archived)
          IS DISTINCT FROM (NEW.id, NEW.name, NEW.owner_id, NEW.workspace_id, NEW.archived))
    EXECUTE FUNCTION det_experiment_list_changed();
CREATE CONSTRAINT TRIGGER workspaces_list_removed
    AFTER DELETE ON workspaces DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    EXECUTE FUNCTION det_experiment_list_changed();
CREATE CONSTRAINT TRIGGER workspaces_list_changed
    AFTER UPDATE OF id, name, archived ON workspaces DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN ((OLD.id, OLD.name, OLD.archived) IS DISTINCT FROM (NEW.id, NEW.name, NEW.archived))
    EXECUTE FUNCTION det_experiment_list_changed();

-- A TRUNCATE has no rows to defer on: it moves the version at once (it locks the whole table
-- until its transaction ends anyway).
CREATE TRIGGER experiments_list_truncated AFTER TRUNCATE ON experiments
    FOR EACH STATEMENT EXECUTE FUNCTION det_experiment_list_changed();
CREATE TRIGGER trials_list_truncated AFTER TRUNCATE ON trials
    FOR EACH STATEMENT EXECUTE FUNCTION det_experiment_list_changed();
CREATE TRIGGER jobs_list_truncated AFTER TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION det_experiment_list_changed();
CREATE TRIGGER users_list_truncated AFTER TRUNCATE ON users
    FOR EACH STATEMENT EXECUTE FUNCTION det_experiment_list_changed();
CREATE TRIGGER projects_list_truncated AFTER TRUNCATE ON projects
    FOR EACH STATEMENT EXECUTE FUNCTION det_experiment_list_changed();
CREATE TRIGGER workspaces_list_truncated AFTER TRUNCATE ON workspaces
    FOR EACH STATEMENT EXECUTE FUNCTION det_experiment_list_changed();
