-- An allocation asked to stop (preempt_requested turns true) or ended (state turns TERMINATED)
-- notifies det_preempt with its id: the preemption long-polls of every API process
-- (det.master.preemptwait) wait for it instead of reading the row every 0.25 s. A trigger, so
-- that no code path (the scheduler's preemption, a kill, a pause, a lost agent, a task's own
-- pending-preemption report) can forget to.
CREATE FUNCTION det_preempt_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('det_preempt', NEW.id);
    RETURN NULL;
END $$;

CREATE TRIGGER allocations_preempt_changed AFTER UPDATE OF preempt_requested, state ON allocations
    FOR EACH ROW
    WHEN ((NEW.preempt_requested AND NOT OLD.preempt_requested)
          OR (NEW.state = 'TERMINATED' AND OLD.state IS DISTINCT FROM 'TERMINATED'))
    EXECUTE FUNCTION det_preempt_changed();
