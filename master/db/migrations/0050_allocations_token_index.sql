-- Every request a task makes (a metric report, a log batch, its preemption long-poll, a
-- checkpoint) names its allocation by the token's digest, and nothing indexed token_hash: each
-- lookup read the whole table, the ended allocations of the cluster's history included (383 us
-- of the server's CPU a lookup at 1,400 running trials, a fifth of the database's work there;
-- growing with every allocation ever run). Not unique: a digest names one allocation, and the
-- lookup takes the one row it finds; an index that refused an old database's rows would stop
-- its upgrade.
CREATE INDEX allocations_token ON allocations (token_hash);
