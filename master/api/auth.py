"""Login, logout, ``/me`` and users."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from flask import Blueprint, request

from det.master import limits
from det.master.api._common import (
    PUBLIC,
    TASK,
    USER,
    acting_user_id,
    allow,
    any_json,
    body,
    current_user,
    db,
    pagination,
    require_admin,
    state,
)
from det.master.errors import (
    InvalidArgument,
    PermissionDenied,
    TooManyRequests,
    Unauthenticated,
    Unimplemented,
)
from det.master.services import login_limits, users

logger = logging.getLogger(__name__)

bp = Blueprint("auth", __name__)


def user_json(u: users.User) -> dict[str, Any]:
    return {
        "id": u.id,
        "username": u.username,
        "admin": u.admin,
        "active": u.active,
        "displayName": u.display_name or "",
        "remote": False,
        "agentUserGroup": None,
        "modifiedAt": None,
    }


def _str_field(data: dict[str, Any], name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{name}: required string")
    return value


@bp.post("/api/v1/auth/login")
@allow(PUBLIC)
def login() -> Any:
    data = body()
    username = _str_field(data, "username")
    if len(username) > users.USERNAME_MAX:
        raise InvalidArgument(f"username: longer than {users.USERNAME_MAX} characters")
    password = data.get("password") or ""
    if not isinstance(password, str):
        raise InvalidArgument("password: must be a string")
    address = request.remote_addr or ""
    now = dt.datetime.now(dt.UTC)
    with db() as conn:
        wait = login_limits.retry_after(conn, username, address, now)
    if wait is not None:
        raise TooManyRequests(
            f"too many failed logins as {username!r} from {address}; try again in {wait} s",
            retry_after=wait,
        )
    try:
        with db() as conn:
            token, user = users.login(
                conn,
                username,
                password,
                hashed=bool(data.get("isHashed")),
                session_hours=state().config.security.session_hours,
            )
            login_limits.clear(conn, username, address)
    except Unauthenticated:
        with db() as conn:  # the failed attempt's transaction was rolled back: a new one
            login_limits.record_failure(conn, username, address, now)
        raise
    return {"token": token, "user": user_json(user)}


@bp.post("/api/v1/auth/logout")
def logout() -> Any:
    token = (request.headers.get("Authorization") or "").partition(" ")[2].strip()
    with db() as conn:
        users.logout(conn, token)
    return {}


@bp.get("/api/v1/me")
@allow(USER, TASK)
def me() -> Any:
    with db() as conn:
        return {"user": user_json(users.get_user(conn, acting_user_id()))}


@bp.get("/api/v1/users")
def list_users() -> Any:
    with db() as conn:
        found = users.list_users(conn)
    active = request.args.get("active")
    if active is not None:
        want = active.lower() == "true"
        found = [u for u in found if u.active == want]
    return {"users": [user_json(u) for u in found], "pagination": pagination(0, 0, len(found))}


@bp.post("/api/v1/users")
def create_user() -> Any:
    require_admin()
    data = body()
    spec = data.get("user")
    if not isinstance(spec, dict):
        raise InvalidArgument("user: required object")
    password = data.get("password") or ""
    if not isinstance(password, str):
        raise InvalidArgument("password: must be a string")
    if not password and not spec.get("remote"):
        raise InvalidArgument("password: required for a non-remote user")
    with db() as conn:
        user = users.create_user(
            conn,
            _str_field(spec, "username"),
            password,
            admin=bool(spec.get("admin")),
            hashed=bool(data.get("isHashed")),
        )
        if spec.get("displayName"):
            name = limits.text("displayName", spec["displayName"], limits.NAME)
            user = users.update_user(conn, user.id, {"display_name": name})
    # Logged once committed: a create that rolled back must not read as done in the log.
    logger.info("user %s created (admin=%s)", user.username, user.admin)
    return {"user": user_json(user)}


@bp.get("/api/v1/users/<int:user_id>")
def get_user(user_id: int) -> Any:
    with db() as conn:
        return {"user": user_json(users.get_user(conn, user_id))}


@bp.get("/api/v1/users/<username>/by-username")
def get_user_by_name(username: str) -> Any:
    with db() as conn:
        return {"user": user_json(users.get_user_by_name(conn, username))}


@bp.patch("/api/v1/users/<int:user_id>")
def patch_user(user_id: int) -> Any:
    me_ = current_user()
    data = body()
    self_service = set(data) <= {"password", "isHashed", "displayName"}
    if user_id != me_.id and not me_.admin:
        raise PermissionDenied("only an admin may change another user")
    if not self_service and not me_.admin:
        raise PermissionDenied("only an admin may change admin or active")
    if data.get("agentUserGroup") is not None:
        raise Unimplemented(
            "agentUserGroup: det does not link users to agent users (link-with-agent-user);"
            " task containers run as their image's user (README: task containers)"
        )
    with db() as conn:
        if "password" in data:
            if not isinstance(data["password"], str):
                raise InvalidArgument("password: must be a string")
            users.set_password(conn, user_id, data["password"], hashed=bool(data.get("isHashed")))
        fields: dict[str, Any] = {}
        if "displayName" in data:
            fields["display_name"] = limits.text("displayName", data["displayName"], limits.NAME)
        for key in ("admin", "active", "remote"):
            if key in data:
                fields[key] = bool(data[key])
        if "username" in data:
            fields["username"] = data["username"]
        user = users.update_user(conn, user_id, fields)
    return {"user": user_json(user)}


@bp.post("/api/v1/users/<int:user_id>/password")
def set_password(user_id: int) -> Any:
    me_ = current_user()
    if user_id != me_.id and not me_.admin:
        raise PermissionDenied("only an admin may change another user's password")
    data = any_json()
    # The generated client sends the bare (hashed) password as a JSON string.
    password = data.get("password") if isinstance(data, dict) else data
    if not isinstance(password, str):
        raise InvalidArgument("password: required string")
    with db() as conn:
        users.set_password(conn, user_id, password, hashed=True)
        user = users.get_user(conn, user_id)
    return {"user": user_json(user)}
