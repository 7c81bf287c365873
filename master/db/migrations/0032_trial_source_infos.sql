-- Which trials used which checkpoint (Determined's trial_source_infos): training code reports it
-- (core_context.experimental.report_task_using_checkpoint / _model_version) so the metrics of
-- the trials that used a checkpoint or model version can be read back from it.
CREATE TABLE trial_source_infos (
    trial_id         int NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    checkpoint_uuid  uuid NOT NULL REFERENCES checkpoints(uuid) ON DELETE CASCADE,
    kind             text NOT NULL,
    model_id         int REFERENCES models(id) ON DELETE SET NULL,
    model_version    int,
    PRIMARY KEY (trial_id, checkpoint_uuid)
);
CREATE INDEX trial_source_infos_checkpoint ON trial_source_infos (checkpoint_uuid);
CREATE INDEX trial_source_infos_model_version ON trial_source_infos (model_id, model_version);
