-- A forked experiment's parent (Determined's CreateExperiment parentId; the wire's forkedFrom).
-- Deleting the parent keeps the fork and forgets the link.
ALTER TABLE experiments ADD COLUMN parent_id bigint REFERENCES experiments (id) ON DELETE SET NULL;
