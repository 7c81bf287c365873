-- A trial's best checkpoint (the completed one whose validation at the same step is best, in
-- det_validation_key's order, then fewer batches, then the earlier validation) is kept in
-- trials.best_checkpoint, so the trial list reads it by key instead of probing the validations
-- at every checkpoint's step of every trial. It changes when a checkpoint is written or changes
-- state (a trigger, whatever the code path: report, GC, a deletion reported by a task), when a
-- validation arrives (det.master.services.trials.report_metrics) and when the searcher's metric
-- or direction changes (det_searcher_changed).
ALTER TABLE trials ADD COLUMN best_checkpoint uuid;

CREATE FUNCTION det_best_checkpoint(trial int) RETURNS uuid LANGUAGE sql STABLE AS $$
    SELECT c.uuid FROM trials t
    JOIN experiments e ON e.id = t.experiment_id
    CROSS JOIN LATERAL (SELECT e.config->'searcher'->>'metric' AS name,
                               det_larger_is_better(e.config) AS larger) s
    JOIN checkpoints c ON c.trial_id = t.id AND c.state = 'COMPLETED'
    JOIN metrics m ON m.trial_id = c.trial_id AND m.metric_group = 'validation'
        AND m.total_batches = c.steps_completed
    WHERE t.id = trial AND det_validation_key(m.metrics, s.name, s.larger) IS NOT NULL
    ORDER BY det_validation_key(m.metrics, s.name, s.larger), m.total_batches, m.id, c.uuid
    LIMIT 1
$$;

-- Sets a trial's pointer when it differs (an unchanged row keeps its version: see
-- det.master.seriescache).
CREATE FUNCTION det_refresh_best_checkpoint(trial int) RETURNS void LANGUAGE sql AS $$
    UPDATE trials t SET best_checkpoint = b.uuid
    FROM (SELECT det_best_checkpoint(trial) AS uuid) b
    WHERE t.id = trial AND t.best_checkpoint IS DISTINCT FROM b.uuid
$$;

UPDATE trials SET best_checkpoint = det_best_checkpoint(id);

CREATE FUNCTION det_checkpoint_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.trial_id IS NOT NULL THEN
        PERFORM det_refresh_best_checkpoint(NEW.trial_id);
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.trial_id IS NOT NULL
            AND OLD.trial_id IS DISTINCT FROM NEW.trial_id THEN
        PERFORM det_refresh_best_checkpoint(OLD.trial_id);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER checkpoints_best AFTER INSERT OR UPDATE OF state, steps_completed, trial_id
    ON checkpoints FOR EACH ROW EXECUTE FUNCTION det_checkpoint_changed();

CREATE OR REPLACE FUNCTION det_searcher_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE trials SET best_validation_id = det_best_validation(id),
        best_checkpoint = det_best_checkpoint(id)
    WHERE experiment_id = NEW.id;
    RETURN NULL;
END $$;
