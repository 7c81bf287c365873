-- A checkpoint GC run may also delete its experiment's TensorBoard files
-- (<cluster id>/tensorboard/experiment/<id> in its checkpoint storage): asked by
-- DeleteTensorboardFiles (det experiment delete-tb-files), and done by the GC of a deleted
-- experiment.
ALTER TABLE checkpoint_gc ADD COLUMN tensorboards boolean NOT NULL DEFAULT false;
