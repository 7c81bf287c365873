-- Which entry of the pool's fallback list launched an instance: its launch is a success in
-- the provisioner's launch history (which the backoff reads), so a restart keeps the backoff.
ALTER TABLE instances ADD COLUMN option_index int;
CREATE INDEX instances_pool_launched ON instances (resource_pool, launched_at);
CREATE INDEX launch_errors_pool_at ON launch_errors (resource_pool, at);
-- The provisioner's idle check reads allocations that are live or ended recently.
CREATE INDEX allocations_ended ON allocations (ended_at);
