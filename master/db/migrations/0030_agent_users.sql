-- det user link-with-agent-user (PatchUser's agentUserGroup): the uid/gid (and names) a user's
-- task containers run as; NULL: the image's user, as Determined runs unlinked users.
ALTER TABLE users ADD COLUMN agent_user_group jsonb;
