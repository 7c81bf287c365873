-- What each allocation runs, the key of the master's task-kind registry
-- (det.master.services.task_kinds): a trial's run, an interactive task's (COMMAND, NOTEBOOK,
-- SHELL, TENSORBOARD) or an experiment's checkpoint GC. The names are the task types the API
-- reports (v1TaskType without its prefix). Rows queued before this get what the master used
-- to decide by probing: an allocation with a trial is the trial's, one whose task id is an
-- interactive task's is of that task's kind, any other is a checkpoint GC's.
ALTER TABLE allocations ADD COLUMN kind text;
UPDATE allocations a SET kind = CASE
    WHEN a.trial_id IS NOT NULL THEN 'TRIAL'
    ELSE coalesce((SELECT n.kind FROM ntsc_tasks n WHERE n.id = a.task_id), 'CHECKPOINT_GC')
END;
ALTER TABLE allocations ALTER COLUMN kind SET NOT NULL;
ALTER TABLE allocations ADD CONSTRAINT allocations_kind CHECK
    (kind IN ('TRIAL', 'COMMAND', 'NOTEBOOK', 'SHELL', 'TENSORBOARD', 'CHECKPOINT_GC'));
