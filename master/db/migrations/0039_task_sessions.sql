-- DET_USER_TOKEN: the user session a task's own tools log in with (the official SDK's
-- client.login(), the official `det`). One per allocation, issued for the job's owner when the
-- allocation's first container spec is built (det.master.services.users.task_session), revoked
-- when the allocation ends; it authenticates only while the allocation is live, and goes with it.
ALTER TABLE user_sessions ADD COLUMN allocation_id text REFERENCES allocations(id) ON DELETE CASCADE;
CREATE UNIQUE INDEX user_sessions_allocation ON user_sessions (allocation_id)
    WHERE allocation_id IS NOT NULL;
