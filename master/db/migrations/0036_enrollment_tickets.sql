-- Enrollment tickets (det.master.services.enrollment): what a cloud agent's user data carries
-- instead of the cluster's agent token. Only the ticket's SHA-256 is stored. A ticket is issued
-- for one launch request and admits one enrollment per machine of it (`uses`), each agent id
-- once, until `expires_at`; an enrollment answers that agent's own token.
CREATE TABLE enrollment_tickets (
    digest text PRIMARY KEY,
    resource_pool text NOT NULL,
    uses integer NOT NULL CHECK (uses >= 0),
    enrolled text[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

CREATE INDEX enrollment_tickets_expires_at ON enrollment_tickets (expires_at);
