-- Access tokens (`det token`, Determined 0.38): user sessions made on purpose, with a
-- description and their own lifespan, listed and revoked by id. Logins stay USER_SESSION.
ALTER TABLE user_sessions ADD COLUMN token_type text NOT NULL DEFAULT 'USER_SESSION';
ALTER TABLE user_sessions ADD COLUMN description text NOT NULL DEFAULT '';
CREATE INDEX user_sessions_access_tokens ON user_sessions (user_id) WHERE token_type = 'ACCESS_TOKEN';
