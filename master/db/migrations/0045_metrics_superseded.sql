-- A trial run that is lost after its last checkpoint (agent killed, container gone, preempted
-- without a final checkpoint) leaves metric rows past that checkpoint; the next run resumes
-- from the checkpoint and reports those periods again. As Determined does (it archives them),
-- a report of run R at total_batches X supersedes the rows of the trial's earlier runs
-- (trial_run_id < R) of the same group at or past X and of other groups past X: the ingest
-- (det.master.services.trials.report_metrics) moves them here in the report's transaction, so
-- every reader of metrics sees each period once, with the latest run's values.
CREATE TABLE metrics_superseded (
    id               bigint PRIMARY KEY,
    trial_id         int NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    trial_run_id     int NOT NULL,
    metric_group     text NOT NULL,
    total_batches    bigint NOT NULL,
    metrics          jsonb NOT NULL,
    reported_at      timestamptz NOT NULL,
    superseded_at    timestamptz NOT NULL DEFAULT now(),
    -- The run whose report moved the row here.
    superseded_by_run int NOT NULL
);
CREATE INDEX metrics_superseded_trial ON metrics_superseded (trial_id, total_batches);

-- What the ingest knows without a query: no row in metrics of a run before
-- metrics_clean_run is at or past metrics_clean_from. A report of a run R <= metrics_clean_run
-- at batches >= metrics_clean_from has nothing to supersede, so only a run's first report (or
-- one that goes back before it) looks. (0, 0) holds for every trial (run ids are >= 0).
ALTER TABLE trials ADD COLUMN metrics_clean_run int NOT NULL DEFAULT 0,
    ADD COLUMN metrics_clean_from bigint NOT NULL DEFAULT 0;
