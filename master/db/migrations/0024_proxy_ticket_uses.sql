-- A proxy ticket (the minute's credential in a URL that opens a task's page) is redeemed once:
-- its nonce is kept here until it has expired.
CREATE TABLE proxy_ticket_uses (
    nonce       text PRIMARY KEY,
    expires_at  timestamptz NOT NULL
);
