-- Checkpoint garbage collection: once an experiment has ended, a zero-slot task deletes the
-- checkpoints its retention policy does not keep (checkpoint_storage.save_*).
-- When the experiment's GC was decided (queued, or nothing to delete); NULL: not yet.
ALTER TABLE experiments ADD COLUMN checkpoint_gc_at timestamptz;
-- When the GC of a deleted experiment (all its checkpoints) was queued; NULL: not yet.
ALTER TABLE experiments ADD COLUMN delete_gc_at timestamptz;
-- Experiments that ended before this migration have had no GC: leave them as they are.
UPDATE experiments SET checkpoint_gc_at = now(), delete_gc_at = now()
    WHERE state IN ('COMPLETED', 'CANCELED', 'ERROR', 'DELETING');
CREATE TABLE checkpoint_gc (
    allocation_id  text PRIMARY KEY REFERENCES allocations(id) ON DELETE CASCADE,
    experiment_id  int NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
    uuids          uuid[] NOT NULL
);
-- The GC pass looks for experiments not yet collected on every tick.
CREATE INDEX experiments_gc_pending ON experiments (id) WHERE checkpoint_gc_at IS NULL;
CREATE INDEX experiments_delete_gc_pending ON experiments (id)
    WHERE delete_gc_at IS NULL AND deleted;
