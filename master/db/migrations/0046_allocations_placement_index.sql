-- Every agent's heartbeat (each second) looks its live allocations up by its key in
-- placement ({agent id: [slot ids]}), as do a spot notice, a lost or disabled agent and the
-- provisioner's idle check (`placement ? agent AND state <> 'TERMINATED'`). Through
-- allocations_live that read every live allocation of the cluster (2,000 rows a heartbeat at
-- 2,000 running trials); a GIN index on the live rows' placement keys reads the agent's own.
-- Partial, as allocations_live: ended allocations, the most rows by far, are not in it.
-- fastupdate off: an allocation's row is updated a few times in its life (placed, running,
-- ended), and with GIN's pending list every lookup between two vacuums scans the list, which
-- made the planner prefer allocations_live again after a scheduler's passes placed 2,000.
CREATE INDEX allocations_live_placement ON allocations USING gin (placement)
    WITH (fastupdate = off) WHERE state <> 'TERMINATED';
