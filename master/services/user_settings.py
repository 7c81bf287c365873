"""A user's own WebUI settings (Determined's GetUserSetting, PostUserSetting, ResetUserSetting):
text values under a storage path and a key, for that user only. det's WebUI keeps the user's
default workspace here (:data:`WEBUI_PATH`, :data:`DEFAULT_WORKSPACE`).

A posted setting with an empty or missing value removes it, as Determined's master does. One
request is checked whole before anything is written, so a refused request changes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from det.master import db, limits
from det.master.db import Conn
from det.master.errors import InvalidArgument, PayloadTooLarge

WEBUI_PATH = "det-webui"
DEFAULT_WORKSPACE = "defaultWorkspaceId"

KEY = 255
VALUE = 64 * 1024
PER_REQUEST = 100
PER_USER = 1000


@dataclass(frozen=True)
class Setting:
    storage_path: str
    key: str
    value: str


def parse(settings: Any) -> list[Setting]:
    """The settings of a PostUserSetting body, checked (one error naming the entry and field)."""
    if settings is None:
        return []
    if not isinstance(settings, list):
        raise InvalidArgument("settings: must be a list")
    if len(settings) > PER_REQUEST:
        raise PayloadTooLarge(f"settings: {len(settings)} entries, the limit is {PER_REQUEST}")
    out = []
    for i, s in enumerate(settings):
        if not isinstance(s, dict):
            raise InvalidArgument(f"settings[{i}]: must be an object")
        key = limits.text(f"settings[{i}].key", s.get("key") or "", KEY, required=True)
        path = limits.text(f"settings[{i}].storagePath", s.get("storagePath"), KEY)
        value = limits.text(f"settings[{i}].value", s.get("value"), VALUE)
        out.append(Setting(path, key, value))
    return out


def get(conn: Conn, user_id: int) -> list[Setting]:
    return db.fetch_rows(
        conn,
        Setting,
        "SELECT storage_path, key, value FROM user_web_settings WHERE user_id = %s"
        " ORDER BY storage_path, key",
        (user_id,),
    )


def post(conn: Conn, user_id: int, settings: list[Setting]) -> None:
    """Sets (or, with an empty value, removes) each setting; refuses to grow past PER_USER."""
    for s in settings:
        if s.value == "":
            conn.execute(
                "DELETE FROM user_web_settings WHERE user_id = %s AND storage_path = %s"
                " AND key = %s",
                (user_id, s.storage_path, s.key),
            )
        else:
            conn.execute(
                "INSERT INTO user_web_settings (user_id, storage_path, key, value)"
                " VALUES (%s, %s, %s, %s) ON CONFLICT (user_id, storage_path, key)"
                " DO UPDATE SET value = EXCLUDED.value",
                (user_id, s.storage_path, s.key, s.value),
            )
    n = db.one_int(
        conn, "SELECT count(*) AS n FROM user_web_settings WHERE user_id = %s", (user_id,)
    )
    if n > PER_USER:
        # The caller's transaction rolls back: nothing of this request stays.
        raise PayloadTooLarge(f"settings: a user keeps at most {PER_USER} settings")


def reset(conn: Conn, user_id: int) -> None:
    conn.execute("DELETE FROM user_web_settings WHERE user_id = %s", (user_id,))


def wire(s: Setting) -> dict[str, str]:
    return {"storagePath": s.storage_path, "key": s.key, "value": s.value}
