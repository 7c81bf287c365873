-- Every change to a user or a session (logout, a revoked token, a password change, deactivation,
-- an admin flag, a rename, a deletion) notifies det_auth: the API processes' session caches
-- (det.master.authcache) forget what they hold. A trigger, so that no code path can forget to.
-- Logins (inserts) change nothing cached.
CREATE FUNCTION det_auth_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('det_auth', '');
    RETURN NULL;
END $$;

CREATE TRIGGER users_auth_changed AFTER UPDATE OR DELETE OR TRUNCATE ON users
    FOR EACH STATEMENT EXECUTE FUNCTION det_auth_changed();
CREATE TRIGGER user_sessions_auth_changed AFTER UPDATE OR DELETE OR TRUNCATE ON user_sessions
    FOR EACH STATEMENT EXECUTE FUNCTION det_auth_changed();
