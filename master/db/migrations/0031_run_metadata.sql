-- Run metadata (Determined's PostRunMetadata / GetRunMetadata; core_context.train.set_metadata):
-- one JSON object per trial (a run is a trial), replaced whole on each post. NULL: never set.
ALTER TABLE trials ADD COLUMN metadata jsonb;
