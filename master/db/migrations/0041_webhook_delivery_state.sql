-- Webhook delivery that isolates receivers (det.master.services.webhook_delivery): each event
-- keeps a stable id and type (sent in a header, and in DEFAULT payloads as Determined's
-- event_id), a lease separate from its next attempt (a master killed mid-send leaves it to run
-- out), the time its retry clock started and how often an admin re-sent it. An event whose
-- retries ran out, or whose receiver answered a final 4xx, is a dead letter (failed_at set)
-- until it is re-sent.
ALTER TABLE webhook_events
    ADD COLUMN event_id uuid,
    ADD COLUMN event_type text,
    ADD COLUMN leased_until timestamptz,
    ADD COLUMN retry_since timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN resends int NOT NULL DEFAULT 0;

UPDATE webhook_events SET
    event_id = coalesce(
        CASE WHEN payload::jsonb->>'event_id' ~ '^[0-9a-fA-F-]{36}$'
             THEN (payload::jsonb->>'event_id')::uuid END,
        gen_random_uuid()),
    event_type = coalesce(payload::jsonb->>'event_type', 'UNKNOWN'),
    retry_since = created_at;

ALTER TABLE webhook_events
    ALTER COLUMN event_id SET NOT NULL,
    ALTER COLUMN event_id SET DEFAULT gen_random_uuid(),
    ALTER COLUMN event_type SET NOT NULL,
    ALTER COLUMN event_type SET DEFAULT 'UNKNOWN';
CREATE UNIQUE INDEX webhook_events_event_id ON webhook_events (event_id);
