-- A trial's best validation (by its experiment's searcher metric, smaller_is_better honoured;
-- ties to the fewer batches, then the earlier row) is kept in trials.best_validation_id by the
-- ingest path (det.master.services.trials.report_metrics) in the transaction that writes the
-- rows, so reads look it up by key instead of sorting every validation of every trial.

-- The sort key of a validation row: its value of the metric, negated when larger is better;
-- NULL when the row has no number for it (such rows never rank). Numbers beyond a double's
-- range rank as +-infinity rather than failing the cast.
CREATE FUNCTION det_validation_key(metrics jsonb, metric text, descending boolean)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(metrics->'avg_metrics'->metric) = 'number' THEN
        (CASE WHEN descending THEN -1 ELSE 1 END) * (
            CASE WHEN abs((metrics->'avg_metrics'->>metric)::numeric) > 1.7976931348623157e308
            THEN sign((metrics->'avg_metrics'->>metric)::numeric)::float8 * 'Infinity'::float8
            ELSE (metrics->'avg_metrics'->>metric)::float8 END)
    END
$$;

-- Whether an experiment's searcher ranks larger values first (its config says
-- smaller_is_better: false).
CREATE FUNCTION det_larger_is_better(config jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce((config->'searcher'->>'smaller_is_better') = 'false', false)
$$;

-- A trial's best validation computed from all its rows (a sort of them): for existing rows,
-- for a change of the searcher's metric, and for rows written by other means than the ingest.
CREATE FUNCTION det_best_validation(trial int) RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT m.id FROM trials t
    JOIN experiments e ON e.id = t.experiment_id
    CROSS JOIN LATERAL (SELECT e.config->'searcher'->>'metric' AS name,
                               det_larger_is_better(e.config) AS larger) s
    JOIN metrics m ON m.trial_id = t.id AND m.metric_group = 'validation'
    WHERE t.id = trial AND det_validation_key(m.metrics, s.name, s.larger) IS NOT NULL
    ORDER BY det_validation_key(m.metrics, s.name, s.larger), m.total_batches, m.id
    LIMIT 1
$$;

UPDATE trials SET best_validation_id = det_best_validation(id);

-- A continued experiment may change its searcher's metric or direction: its trials' pointers
-- follow (a trigger, so that no code path can forget to).
CREATE FUNCTION det_searcher_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE trials SET best_validation_id = det_best_validation(id) WHERE experiment_id = NEW.id;
    RETURN NULL;
END $$;

CREATE TRIGGER experiments_searcher_changed AFTER UPDATE OF config ON experiments
    FOR EACH ROW WHEN (
        OLD.config->'searcher'->'metric' IS DISTINCT FROM NEW.config->'searcher'->'metric'
        OR det_larger_is_better(OLD.config) IS DISTINCT FROM det_larger_is_better(NEW.config))
    EXECUTE FUNCTION det_searcher_changed();
