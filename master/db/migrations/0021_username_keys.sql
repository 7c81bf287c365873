-- Usernames compared without case or width (det.master.services.usernames): each user's key
-- (NFKC_Casefold of its name), unique. Python computes keys (PostgreSQL has no case fold), so
-- rows written before this migration get theirs when the master starts
-- (users.fill_username_keys); until then, and for names that clash with an older one's key,
-- the key is NULL and the user logs in by its exact name.
ALTER TABLE users ADD COLUMN username_key text;
CREATE UNIQUE INDEX users_username_key_unique ON users (username_key);
