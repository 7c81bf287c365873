-- The searcher's pass that processed each event. A pass reads an experiment's unprocessed
-- events by id, but ids are taken at insert and transactions commit in their own order: an
-- event whose transaction committed after a later id was processed comes in a later pass. So
-- the order the searcher saw its events in is (pass, id), not id: what a replay of a search
-- follows (tests/integration/test_search_tpe_restart.py).
CREATE SEQUENCE searcher_event_passes;
ALTER TABLE searcher_events ADD COLUMN processed_pass bigint;
