-- Each API process caches what an allocation token names (det.master.api._common, the session
-- cache's rules: det.master.authcache), so a task's reports, log batches and long-polls do not
-- look their token up each time. What ends a token's validity, or changes what it names,
-- notifies det_auth as a session's revocation does: the allocation's end, a new token, another
-- trial; and the deletion of an allocation, a trial or an experiment (the trial's experiment and
-- that experiment's owner are part of what a token names).
CREATE TRIGGER allocations_auth_changed AFTER UPDATE OF state, token_hash, trial_id ON allocations
    FOR EACH ROW
    WHEN ((NEW.state = 'TERMINATED' AND OLD.state IS DISTINCT FROM 'TERMINATED')
          OR NEW.token_hash IS DISTINCT FROM OLD.token_hash
          OR NEW.trial_id IS DISTINCT FROM OLD.trial_id)
    EXECUTE FUNCTION det_auth_changed();
CREATE TRIGGER allocations_auth_deleted AFTER DELETE OR TRUNCATE ON allocations
    FOR EACH STATEMENT EXECUTE FUNCTION det_auth_changed();
CREATE TRIGGER trials_auth_changed AFTER DELETE OR TRUNCATE OR UPDATE OF experiment_id ON trials
    FOR EACH STATEMENT EXECUTE FUNCTION det_auth_changed();
CREATE TRIGGER experiments_auth_changed AFTER DELETE OR TRUNCATE OR UPDATE OF owner_id ON experiments
    FOR EACH STATEMENT EXECUTE FUNCTION det_auth_changed();
