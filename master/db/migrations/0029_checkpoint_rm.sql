-- det checkpoint rm (CheckpointsRemoveFiles): a GC run that removes only the files these globs
-- name from its checkpoints and reports what is left; NULL: the run deletes them entirely.
ALTER TABLE checkpoint_gc ADD COLUMN globs text[];
