-- Failed logins, for throttling (det.master.services.login_limits): one row per failure,
-- pruned as they leave the window. Kept in PostgreSQL so every API process sees the same counts.
CREATE TABLE login_failures (
    id         bigserial PRIMARY KEY,
    username   text NOT NULL,
    address    text NOT NULL,
    failed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX login_failures_pair ON login_failures (username, address, failed_at);
CREATE INDEX login_failures_address ON login_failures (address, failed_at);
