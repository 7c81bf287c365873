-- The experiment list's kept pages checked in memory while a master is alone on its database
-- (det.master.listcache): a change the list shows, besides moving the list's version at its
-- commit, notifies `det_list` then (once a transaction), so the committing master's own
-- connection moves the list's epoch before the change's request is answered, and every other
-- listener hears it.
CREATE OR REPLACE FUNCTION det_experiment_list_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Once per transaction: later calls find their own id and write nothing.
    UPDATE list_versions SET version = pg_current_xact_id()
        WHERE name = 'experiments' AND version <> pg_current_xact_id();
    IF FOUND THEN
        PERFORM pg_notify('det_list', '');
    END IF;
    RETURN NULL;
END $$;

-- Whether any workspace is private decides who reads what (det.master.authz.ANY_PRIVATE):
-- read with the version until now, it moves the version too, so a page kept in memory never
-- outlives it (a workspace added private, or turned private or public).
CREATE CONSTRAINT TRIGGER workspaces_list_added_private
    AFTER INSERT ON workspaces DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.private)
    EXECUTE FUNCTION det_experiment_list_changed();
CREATE CONSTRAINT TRIGGER workspaces_list_private
    AFTER UPDATE OF private ON workspaces DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.private IS DISTINCT FROM NEW.private)
    EXECUTE FUNCTION det_experiment_list_changed();
