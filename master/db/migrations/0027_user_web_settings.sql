-- A user's own WebUI settings (Determined's PostUserSetting/GetUserSetting): one text value per
-- (storage path, key); the WebUI keeps its default workspace here.
CREATE TABLE user_web_settings (
    user_id      integer NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    storage_path text NOT NULL,
    key          text NOT NULL,
    value        text NOT NULL,
    PRIMARY KEY (user_id, storage_path, key)
);
