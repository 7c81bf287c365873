"""Login, logout, ``/me`` and users."""

from __future__ import annotations

import datetime as dt
import logging
import urllib.parse

from flask import Blueprint, Response, after_this_request, request

from det.master import limits
from det.master.api._common import (
    PUBLIC,
    TASK,
    USER,
    acting_user_id,
    allow,
    current_user,
    db,
    pagination,
    principal,
    require_admin,
    state,
)
from det.master.api._contract import contract
from det.master.errors import (
    InvalidArgument,
    PermissionDenied,
    TooManyRequests,
    Unauthenticated,
)
from det.master.rows.users import AgentUserLink
from det.master.schemas import d
from det.master.schemas import users as wire
from det.master.schemas.requests import UsersQuery
from det.master.services import agent_users, cluster_messages, login_limits, usernames, users
from det.master.wire import Empty

logger = logging.getLogger(__name__)

bp = Blueprint("auth", __name__)


def _username(value: str | None, name: str = "username") -> str:
    if not value:
        raise InvalidArgument(f"{name}: required string")
    return value


@bp.post("/api/v1/auth/login")
@allow(PUBLIC)
@contract("Login")
def login(body: d.v1LoginRequest) -> d.v1LoginResponse:
    username = _username(body.get("username"))
    if len(username) > users.USERNAME_MAX:
        raise InvalidArgument(f"username: longer than {users.USERNAME_MAX} characters")
    password = body.get("password") or ""
    # The client's address (behind trusted proxies, the one they forwarded: clientaddr), and
    # the name as users are told apart: ALICE and alice share their limits.
    address = request.remote_addr or ""
    name_key = usernames.key(username)
    now = dt.datetime.now(dt.UTC)
    with db() as conn:
        wait = login_limits.retry_after(conn, name_key, address, now)
    if wait is not None:
        logger.warning("login as %r from %s refused: too many failed logins", username, address)
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
                hashed=bool(body.get("isHashed")),
                session_hours=state().config.security.session_hours,
            )
            login_limits.clear(conn, name_key, address)
    except Unauthenticated:
        with db() as conn:  # the failed attempt's transaction was rolled back: a new one
            login_limits.record_failure(conn, name_key, address, now)
        logger.info("login as %r from %s failed", username, address)
        raise
    return {"token": token, "user": wire.user(user)}


@bp.post("/api/v1/auth/logout")
@contract("Logout")
def logout() -> Empty:
    token = (request.headers.get("Authorization") or "").partition(" ")[2].strip()
    with db() as conn:
        users.logout(conn, token)
    return {}


@bp.get("/api/v1/me")
@allow(USER, TASK)
@contract("GetMe")
def me() -> d.v1GetMeResponse:
    """The caller's user; for a task (an allocation token), the user it runs for: its
    experiment's owner, or the owner of the command, notebook, shell or TensorBoard."""
    task = principal().task
    with db() as conn:
        if task is None:
            user = users.get_user(conn, acting_user_id())
            message = cluster_messages.active(conn)
        else:
            user_id = task.user_id or users.allocation_owner(conn, task.allocation_id)
            if user_id is None:
                raise PermissionDenied(f"allocation {task.allocation_id} runs for no user")
            return {"user": wire.user(users.get_user(conn, user_id))}
    if message is not None:
        # det's CLI checks its session here before every command and prints the message on
        # stderr; percent-encoded, as a header carries Latin-1 only.
        text = urllib.parse.quote(message.message, safe=" ")

        @after_this_request
        def _header(resp: Response) -> Response:
            resp.headers[CLUSTER_MESSAGE_HEADER] = text
            return resp

    return {"user": wire.user(user)}


CLUSTER_MESSAGE_HEADER = "X-Det-Cluster-Message"


_USER_SORT = {
    "SORT_BY_USER_NAME": lambda u: u.username,
    "SORT_BY_DISPLAY_NAME": lambda u: (u.display_name or "", u.username),
    "SORT_BY_ADMIN": lambda u: (u.admin, u.id),
    "SORT_BY_ACTIVE": lambda u: (u.active, u.id),
    "SORT_BY_MODIFIED_TIME": lambda u: (u.modified_at is not None, u.modified_at, u.id),
    "SORT_BY_NAME": lambda u: ((u.display_name or u.username).lower(), u.id),
    "SORT_BY_REMOTE": lambda u: (u.remote, u.id),
}


@bp.get("/api/v1/users")
@contract("GetUsers", params=UsersQuery)
def list_users(params: UsersQuery) -> d.v1GetUsersResponse:
    with db() as conn:
        found = users.list_users(conn)
    if params.active is not None:
        found = [u for u in found if u.active == params.active]
    if params.admin is not None:
        found = [u for u in found if u.admin == params.admin]
    name = params.name.lower()
    if name:
        found = [
            u for u in found if name in u.username.lower() or name in (u.display_name or "").lower()
        ]
    key = _USER_SORT.get(params.sortBy)
    if key is not None:
        found.sort(key=key)  # type: ignore[arg-type]
    if params.orderBy == "ORDER_BY_DESC":
        found.reverse()
    offset, limit = params.offset, params.limit
    page = found[offset : (offset + limit) if limit > 0 else None]
    return {
        "users": [wire.user(u) for u in page],
        "pagination": pagination(offset, limit, len(found)),
    }


@bp.post("/api/v1/users")
@contract("PostUser")
def create_user(body: d.v1PostUserRequest) -> d.v1PostUserResponse:
    require_admin()
    spec = body.get("user")
    if spec is None:
        raise InvalidArgument("user: required object")
    password = body.get("password") or ""
    if not password and not spec.get("remote"):
        raise InvalidArgument("password: required for a non-remote user")
    link = _agent_link(spec)
    with db() as conn:
        user = users.create_user(
            conn,
            _username(spec.get("username"), "user.username"),
            password,
            admin=bool(spec.get("admin")),
            hashed=bool(body.get("isHashed")),
            # Determined's client sends active: true unless told otherwise.
            active=spec.get("active") is not False,
        )
        display_name = spec.get("displayName")
        if display_name:
            name = limits.text("displayName", display_name, limits.NAME)
            user = users.update_user(conn, user.id, {"display_name": name})
        if link is not None:
            agent_users.link(conn, user.id, link[0])
            user = users.get_user(conn, user.id)
    # Logged once committed: a create that rolled back must not read as done in the log.
    logger.info("user %s created (admin=%s, active=%s)", user.username, user.admin, user.active)
    return {"user": wire.user(user)}


@bp.get("/api/v1/users/<int:user_id>")
@contract("GetUser")
def get_user(user_id: int) -> d.v1GetUserResponse:
    with db() as conn:
        return {"user": wire.user(users.get_user(conn, user_id))}


@bp.get("/api/v1/users/<username>/by-username")
@contract("GetUserByUsername")
def get_user_by_name(username: str) -> d.v1GetUserByUsernameResponse:
    with db() as conn:
        return {"user": wire.user(users.get_user_by_name(conn, username))}


# PatchUser's answer, with a header when there is a warning (see _warned).
_Patched = d.v1PatchUserResponse | tuple[d.v1PatchUserResponse, int, dict[str, str]]


@bp.patch("/api/v1/users/<int:user_id>")
@contract("PatchUser")
def patch_user(user_id: int, body: d.v1PatchUser) -> _Patched:
    me_ = current_user()
    data = body
    self_service = set(data) <= {"password", "isHashed", "displayName"}
    if user_id != me_.id and not me_.admin:
        raise PermissionDenied("only an admin may change another user")
    if not self_service and not me_.admin:
        raise PermissionDenied(
            "only an admin may change admin, active, remote, username or agentUserGroup"
        )
    link = _agent_link(data)
    with db() as conn:
        if link is not None:
            agent_users.link(conn, user_id, link[0])
        password = data.get("password")
        if password is not None:
            users.set_password(conn, user_id, password, hashed=bool(data.get("isHashed")))
        fields: users.UserChanges = {}
        if "displayName" in data:
            fields["display_name"] = limits.text("displayName", data["displayName"], limits.NAME)
        for key in ("admin", "active", "remote"):
            if data.get(key) is not None:
                fields[key] = bool(data.get(key))
        username = data.get("username")
        if username is not None:
            fields["username"] = username
        user = users.update_user(conn, user_id, fields)
    return _warned({"user": wire.user(user)}, link)


def _warned(answer: d.v1PatchUserResponse, link: tuple[AgentUserLink | None] | None) -> _Patched:
    """PatchUser's answer, with ``X-Det-Warning`` when the new agent user could not write the
    cluster's checkpoint storage (a header: Determined's client reads the body only; det's
    prints it)."""
    st = state()
    warning = (
        agent_users.storage_warning(st.config.checkpoint_storage, st.cluster_id, link[0])
        if link is not None and link[0] is not None
        else None
    )
    if warning is None:
        return answer
    logger.warning("PatchUser: %s", warning)
    return answer, 200, {"X-Det-Warning": warning}


def _agent_link(data: d.v1PatchUser | d.v1User) -> tuple[AgentUserLink | None] | None:
    """PatchUser's (or PostUser's) ``agentUserGroup``, checked (admins only: the caller was
    checked); None when the request does not set it, ``(None,)`` when it unlinks."""
    value = data.get("agentUserGroup")
    if value is None:
        return None
    return (agent_users.parse(value),)


@bp.post("/api/v1/users/<int:user_id>/password")
@contract("SetUserPassword", body=wire.SetPasswordBody)
def set_password(user_id: int, body: wire.SetPasswordBody) -> d.v1SetUserPasswordResponse:
    me_ = current_user()
    if user_id != me_.id and not me_.admin:
        raise PermissionDenied("only an admin may change another user's password")
    # The generated client sends the bare (hashed) password as a JSON string.
    password = body if isinstance(body, str) else body["password"]
    with db() as conn:
        users.set_password(conn, user_id, password, hashed=True)
        user = users.get_user(conn, user_id)
    return {"user": wire.user(user)}
