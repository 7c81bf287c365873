"""Access tokens (``det token``): user sessions created on purpose, with a description and a
lifespan of their own, listed, described, edited and revoked by id (Determined 0.38's
``/api/v1/tokens``). They authenticate exactly as a login's session does
(:func:`det.master.services.users.user_for_token`); only their hash is stored."""

from __future__ import annotations

import datetime as dt
import re
import secrets
from typing import Any

import psycopg
from psycopg.rows import class_row

from det.master import db
from det.master.db import Conn
from det.master.errors import InvalidArgument, NotFound
from det.master.rows.users import Token
from det.master.schemas import d
from det.master.schemas.users import token_info
from det.master.services.users import token_digest

ACCESS_TOKEN = "ACCESS_TOKEN"
DEFAULT_LIFESPAN = dt.timedelta(days=30)
# "-1" asks for a token that never expires; PostgreSQL's 'infinity' has no Python datetime.
NEVER = dt.datetime(9999, 12, 31, tzinfo=dt.UTC)
# The longest a non-admin's token may live; only an admin creates tokens that never expire
# (for a service account, say) or live longer.
USER_MAX_LIFESPAN = dt.timedelta(days=365)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|ns)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


_COLUMNS = "id, user_id, description, created_at, expires_at, revoked_at, token_type"


def _tokens(conn: Conn) -> psycopg.Cursor[Token]:
    return conn.cursor(row_factory=class_row(Token))


def parse_lifespan(raw: Any, now: dt.datetime, *, admin: bool = True) -> dt.datetime:
    """When a token with lifespan ``raw`` (a Go duration such as ``"720h"``, ``"-1"`` for
    never, empty for the default 30 days) created at ``now`` expires. A non-admin (``admin``
    false) may ask for at most :data:`USER_MAX_LIFESPAN`."""
    if raw is None or raw == "":
        return now + DEFAULT_LIFESPAN
    if not isinstance(raw, str):
        raise InvalidArgument("lifespan: must be a duration string such as '720h'")
    longest = f"{int(USER_MAX_LIFESPAN.total_seconds() // 3600)}h"
    if raw.strip() == "-1":
        if not admin:
            raise InvalidArgument(
                f"lifespan: only an admin may create a token that never expires ('-1');"
                f" give a duration of at most {longest}"
            )
        return NEVER
    parts = _DURATION.findall(raw.strip())
    if not parts or "".join(n + u for n, u in parts) != raw.strip():
        raise InvalidArgument(f"lifespan: {raw!r} is not a duration such as '720h' or '-1'")
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    if seconds <= 0:
        raise InvalidArgument("lifespan: must be positive (or '-1' for no expiry)")
    if not admin and seconds > USER_MAX_LIFESPAN.total_seconds():
        raise InvalidArgument(f"lifespan: {raw!r} is longer than a non-admin's {longest}")
    if seconds > (NEVER - now).total_seconds():
        return NEVER
    return now + dt.timedelta(seconds=seconds)


def create(
    conn: Conn,
    user_id: int,
    *,
    lifespan: Any,
    description: str,
    now: dt.datetime,
    by_admin: bool = True,
) -> tuple[int, str]:
    """A new access token for ``user_id``: its id and the token (shown once). ``by_admin``:
    whether an admin asks for it (:func:`parse_lifespan`)."""
    token = secrets.token_urlsafe(32)
    token_id = db.one_int(
        conn,
        "INSERT INTO user_sessions (user_id, token_hash, expires_at, token_type, description)"
        " VALUES (%s, %s, %s, %s, %s) RETURNING id",
        (
            user_id,
            token_digest(token),
            parse_lifespan(lifespan, now, admin=by_admin),
            ACCESS_TOKEN,
            description,
        ),
    )
    return token_id, token


def list_tokens(
    conn: Conn,
    *,
    user_id: int | None,
    token_ids: list[int],
    show_inactive: bool,
) -> list[d.v1TokenInfo]:
    """Access tokens, optionally of one user or with the given ids; revoked and expired ones
    only with ``show_inactive``."""
    where = ["token_type = %s"]
    params: list[Any] = [ACCESS_TOKEN]
    if user_id is not None:
        where.append("user_id = %s")
        params.append(user_id)
    if token_ids:
        where.append("id = ANY(%s)")
        params.append(token_ids)
    if not show_inactive:
        where.append("revoked_at IS NULL AND expires_at > now()")
    rows = (
        _tokens(conn)
        .execute(
            f"SELECT {_COLUMNS} FROM user_sessions WHERE {' AND '.join(where)} ORDER BY id", params
        )
        .fetchall()
    )
    return [token_info(r) for r in rows]


def get(conn: Conn, token_id: int, *, for_update: bool = False) -> Token:
    row = (
        _tokens(conn)
        .execute(
            f"SELECT {_COLUMNS} FROM user_sessions WHERE id = %s AND token_type = %s"
            + (" FOR NO KEY UPDATE" if for_update else ""),
            (token_id, ACCESS_TOKEN),
        )
        .fetchone()
    )
    if row is None:
        raise NotFound(f"access token {token_id} not found")
    return row


def patch(conn: Conn, token_id: int, *, description: str | None, revoke: bool) -> d.v1TokenInfo:
    """Edits a token's description and/or revokes it (a revoked token stays revoked)."""
    get(conn, token_id, for_update=True)
    if description is not None:
        conn.execute(
            "UPDATE user_sessions SET description = %s WHERE id = %s", (description, token_id)
        )
    if revoke:
        conn.execute(
            "UPDATE user_sessions SET revoked_at = now() WHERE id = %s AND revoked_at IS NULL",
            (token_id,),
        )
    return token_info(get(conn, token_id))
