-- Unmanaged experiments (Determined's core_v2 off-cluster runs): never scheduled nor searched;
-- their scripts report with their owner's session token. External ids let a rerun find its
-- experiment and trial again; they are unique per owner (one user's ids never reach another's).
ALTER TABLE experiments ADD COLUMN unmanaged boolean NOT NULL DEFAULT false;
ALTER TABLE experiments ADD COLUMN external_experiment_id text;
CREATE UNIQUE INDEX experiments_external_id ON experiments (owner_id, external_experiment_id)
    WHERE external_experiment_id IS NOT NULL;
ALTER TABLE trials ADD COLUMN external_trial_id text;
ALTER TABLE trials ADD COLUMN last_activity timestamptz;
CREATE UNIQUE INDEX trials_external_id ON trials (experiment_id, external_trial_id)
    WHERE external_trial_id IS NOT NULL;
