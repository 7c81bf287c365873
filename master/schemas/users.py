"""Users and access tokens on the wire: ``v1User`` from a :class:`~det.master.rows.users.User`
and ``v1TokenInfo`` from a ``user_sessions`` row."""

from __future__ import annotations

from typing import cast

from typing_extensions import TypedDict

from det.master.rows.users import Token, User
from det.master.schemas import d
from det.master.schemas._types import Password
from det.master.wire import ts

_TOKEN_TYPE: dict[str, d.v1TokenType] = {
    "ACCESS_TOKEN": "TOKEN_TYPE_ACCESS_TOKEN",
    "USER_SESSION": "TOKEN_TYPE_USER_SESSION",
}


def user(u: User) -> d.v1User:
    return {
        "id": u.id,
        "username": u.username,
        "admin": u.admin,
        "active": u.active,
        "displayName": u.display_name or "",
        "remote": u.remote,
        "agentUserGroup": cast("d.v1AgentUserGroup", u.agent_user_group),
        "modifiedAt": ts(u.modified_at),
    }


def token_info(row: Token) -> d.v1TokenInfo:
    """``row`` is a ``user_sessions`` row."""
    return {
        "id": row["id"],
        "userId": row["user_id"],
        "description": row["description"],
        "createdAt": ts(row["created_at"]),
        "expiry": ts(row["expires_at"]),
        "revoked": row["revoked_at"] is not None,
        "tokenType": _TOKEN_TYPE.get(row["token_type"], "TOKEN_TYPE_UNSPECIFIED"),
    }


class PasswordObject(TypedDict):
    """det also takes ``{"password": ...}`` where Determined's client sends the bare string."""

    password: Password


# SetUserPassword's body: Determined's generated client sends the (hashed) password as a bare
# JSON string.
SetPasswordBody = Password | PasswordObject
