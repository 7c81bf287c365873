"""Users, passwords and session tokens.

Passwords: the official client sends ``sha512(salt + password)`` (``isHashed``); we normalise
every password to that form and keep only a slow salted hash (scrypt) of it. Tokens are random,
stored as their SHA-256, expire after ``session_hours`` and can be revoked (logout). A task's own
session (``DET_USER_TOKEN``, :func:`task_session`) is derived from the cluster's secret and its
allocation id instead, and lives only as long as the allocation.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import args_row, class_row
from typing_extensions import TypedDict

from det.master import db
from det.master.db import Conn
from det.master.errors import Conflict, InvalidArgument, NotFound, Unauthenticated
from det.master.rows.users import AgentUserLink, User
from det.master.services import usernames

logger = logging.getLogger(__name__)

# The fixed salt Determined's client uses before sending a password (a wire-format fact).
CLIENT_SALT = "GubPEmmotfiK9TMD6Zdw"
_SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}


# User's fields, in order: the columns every read of a user selects (class_row(User)).
_COLUMNS = "id, username, admin, active, display_name, remote, modified_at, agent_user_group"


@dataclass(frozen=True, slots=True)
class _Name:
    id: int
    username: str


@dataclass(frozen=True, slots=True)
class _Credentials:
    """What a login checks of the user it names."""

    id: int
    password_hash: str
    active: bool


@dataclass(frozen=True, slots=True)
class AllocationToken:
    """The allocation an allocation token belongs to (:func:`allocation_for_digest`)."""

    id: str
    task_id: str
    trial_id: int | None
    state: str
    ended_at: dt.datetime | None
    #: Its trial's experiment and that experiment's owner (None for other kinds).
    experiment_id: int | None
    owner_id: int | None


class UserChanges(TypedDict, total=False):
    """What :func:`update_user` changes (each field only when given)."""

    username: str
    display_name: str
    admin: bool
    active: bool
    remote: bool


def client_hash(password: str) -> str:
    if not password:
        return password
    return hashlib.sha512((CLIENT_SALT + password).encode()).hexdigest()


def hash_password(client_hashed: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(client_hashed.encode(), salt=salt, **_SCRYPT)
    return "scrypt$" + base64.b64encode(salt).decode() + "$" + base64.b64encode(digest).decode()


def verify_password(client_hashed: str, stored: str) -> bool:
    try:
        _, salt_b64, digest_b64 = stored.split("$")
    except ValueError:
        return False
    digest = hashlib.scrypt(client_hashed.encode(), salt=base64.b64decode(salt_b64), **_SCRYPT)
    return hmac.compare_digest(digest, base64.b64decode(digest_b64))


@functools.cache
def _unknown_user_hash() -> str:
    """A hash no password matches, with the same scrypt cost as real ones."""
    return hash_password(secrets.token_hex(32))


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _users(conn: Conn) -> psycopg.Cursor[User]:
    return conn.cursor(row_factory=class_row(User))


def ensure_admin(conn: Conn, initial_password: str) -> None:
    """Creates ``admin`` (and a ``determined`` non-admin user, as Determined does) once. A
    password is hashed only for a user to create: a master starting on a database that has them
    (every start but the first; a serverless instance's each cold start) no longer pays two
    scrypt hashes (~40 CPU-ms each) for rows the insert would drop."""
    present = set(
        db.column(conn, str, "SELECT username FROM users WHERE username IN ('admin', 'determined')")
    )
    for name, admin in (("admin", True), ("determined", False)):
        if name in present:
            continue
        conn.execute(
            "INSERT INTO users (username, username_key, password_hash, admin)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (name, usernames.key(name), hash_password(client_hash(initial_password)), admin),
        )


# One writer of usernames at a time: the checks against every existing name see them all.
_USERNAME_LOCK_KEY = 0x6465745F75736572  # "det_user"


def fill_username_keys(conn: Conn) -> None:
    """Gives rows written before usernames had keys (migration 0021) theirs, oldest first. Of
    names that differ only in case or width, the oldest gets the key (and case-insensitive
    login); the others keep logging in by their exact name, and a warning names them."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_USERNAME_LOCK_KEY,))
    rows = db.fetch_rows(
        conn, _Name, "SELECT id, username FROM users WHERE username_key IS NULL ORDER BY id"
    )
    for row in rows:
        k = usernames.key(row.username)
        other = db.scalar(conn, str, "SELECT username FROM users WHERE username_key = %s", (k,))
        if other is not None:
            logger.warning(
                "users %r and %r differ only in case or width: %r logs in by its exact name"
                " only; rename one of them",
                other,
                row.username,
                row.username,
            )
            continue
        conn.execute("UPDATE users SET username_key = %s WHERE id = %s", (k, row.id))


_USERNAME_PUNCTUATION = frozenset("._@+-")
USERNAME_MAX = 128


def check_username(username: str) -> None:
    """Letters and digits (any script) and ``. _ @ + -``, starting with a letter or digit, at
    most 128 characters: no spaces, slashes, control or bidirectional-override characters; its
    letters from one script (:mod:`det.master.services.usernames`). ``username`` is NFKC."""
    if (
        not 1 <= len(username) <= USERNAME_MAX
        or not username[0].isalnum()
        or not all(c.isalnum() or c in _USERNAME_PUNCTUATION for c in username)
    ):
        raise InvalidArgument(
            "username: must be 1-128 letters, digits or . _ @ + -, starting with a letter or digit"
        )
    mixed = usernames.check_script(username)
    if mixed is not None:
        raise InvalidArgument(mixed)


def _claim_username(conn: Conn, username: Any, user_id: int | None = None) -> str:
    """``username`` checked and normalised for user ``user_id`` (None: a new user): raises
    Conflict when another user has the same name up to case and width, or one that reads the
    same (:func:`det.master.services.usernames.skeleton`). Holds the username lock until the
    transaction ends."""
    if not isinstance(username, str):
        raise InvalidArgument("username: must be a string")
    name = usernames.normalize(username)
    check_username(name)
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_USERNAME_LOCK_KEY,))
    k, sk = usernames.key(name), usernames.skeleton(name)
    for row in db.fetch_rows(conn, _Name, "SELECT id, username FROM users ORDER BY id"):
        if row.id == user_id:
            continue
        if usernames.key(row.username) == k:
            raise Conflict(f"user '{row.username}' already exists")
        if usernames.skeleton(row.username) == sk:
            raise Conflict(
                f"username: '{name}' reads the same as the existing user '{row.username}'"
                " (lookalike letters of another script)"
            )
    return name


def create_user(
    conn: Conn,
    username: str,
    password: str,
    *,
    admin: bool,
    hashed: bool,
    active: bool = True,
) -> User:
    name = _claim_username(conn, username)
    pw = password if hashed else client_hash(password)
    row = (
        _users(conn)
        .execute(
            "INSERT INTO users (username, username_key, password_hash, admin, active)"
            f" VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING {_COLUMNS}",
            (name, usernames.key(name), hash_password(pw), admin, active),
        )
        .fetchone()
    )
    if row is None:
        raise Conflict(f"user '{name}' already exists")
    return row


def _find_by_name(conn: Conn, username: str) -> _Credentials | None:
    """The user named exactly ``username``, else the one whose name is the same up to case and
    width (:func:`det.master.services.usernames.key`)."""
    cur = conn.cursor(row_factory=class_row(_Credentials))
    return cur.execute(
        "SELECT id, password_hash, active FROM users WHERE username = %s OR username_key = %s"
        " ORDER BY username = %s DESC LIMIT 1",
        (username, usernames.key(username), username),
    ).fetchone()


def get_user(conn: Conn, user_id: int) -> User:
    row = _users(conn).execute(f"SELECT {_COLUMNS} FROM users WHERE id = %s", (user_id,)).fetchone()
    if row is None:
        raise NotFound(f"user {user_id} not found")
    return row


def get_user_by_name(conn: Conn, username: str) -> User:
    row = _find_by_name(conn, username)
    if row is None:
        raise NotFound(f"user '{username}' not found")
    return get_user(conn, row.id)


def list_users(conn: Conn) -> list[User]:
    return _users(conn).execute(f"SELECT {_COLUMNS} FROM users ORDER BY id").fetchall()


def set_password(conn: Conn, user_id: int, password: str, *, hashed: bool) -> None:
    pw = password if hashed else client_hash(password)
    conn.execute(
        "UPDATE users SET password_hash = %s, modified_at = now() WHERE id = %s",
        (hash_password(pw), user_id),
    )
    # A password change ends every other session of that user.
    conn.execute(
        "UPDATE user_sessions SET revoked_at = now() WHERE user_id = %s AND revoked_at IS NULL",
        (user_id,),
    )


def update_user(conn: Conn, user_id: int, fields: UserChanges) -> User:
    if "username" in fields:
        rename_user(conn, user_id, fields["username"])
    changes: list[tuple[str, str | bool]] = []
    if "display_name" in fields:
        changes.append(("display_name", fields["display_name"]))
    for column in ("admin", "active", "remote"):
        if column in fields:
            changes.append((column, bool(fields.get(column))))
    for column, value in changes:
        conn.execute(
            f"UPDATE users SET {column} = %s, modified_at = now() WHERE id = %s",
            (value, user_id),
        )
    return get_user(conn, user_id)


def rename_user(conn: Conn, user_id: int, username: Any) -> None:
    """Renames a user (sessions and ownership follow the id, so nothing else changes)."""
    get_user(conn, user_id)
    name = _claim_username(conn, username, user_id)
    conn.execute(
        "UPDATE users SET username = %s, username_key = %s, modified_at = now() WHERE id = %s",
        (name, usernames.key(name), user_id),
    )


def login(
    conn: Conn, username: str, password: str, *, hashed: bool, session_hours: float
) -> tuple[str, User]:
    row = _find_by_name(conn, username)
    pw = password if hashed else client_hash(password)
    # An unknown user costs the same scrypt as a known one: the answer's timing must not tell
    # which usernames exist.
    stored = row.password_hash if row is not None else _unknown_user_hash()
    if not verify_password(pw, stored) or row is None or not row.active:
        raise Unauthenticated("invalid credentials")
    token = secrets.token_urlsafe(32)
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(hours=session_hours)
    conn.execute(
        "INSERT INTO user_sessions (user_id, token_hash, expires_at) VALUES (%s, %s, %s)",
        (row.id, token_digest(token), expires),
    )
    return token, get_user(conn, row.id)


def logout(conn: Conn, token: str) -> None:
    conn.execute(
        "UPDATE user_sessions SET revoked_at = now() WHERE token_hash = %s AND revoked_at IS NULL",
        (token_digest(token),),
    )


def user_for_token(conn: Conn, token: str) -> User | None:
    found = session_for_digest(conn, token_digest(token))
    return found[0] if found else None


def session_for_digest(conn: Conn, digest: str) -> tuple[User, float] | None:
    """The active user of a live session (by its token's digest) and when it expires (a Unix
    time), or None."""
    cur = conn.cursor(row_factory=args_row(_session))
    return cur.execute(
        f"SELECT {', '.join('u.' + c for c in _COLUMNS.split(', '))},"
        " extract(epoch FROM s.expires_at)::float8"
        " FROM user_sessions s JOIN users u ON u.id = s.user_id"
        " WHERE s.token_hash = %s AND s.revoked_at IS NULL AND s.expires_at > now() AND u.active"
        # A task's session (DET_USER_TOKEN) lives no longer than its allocation, whatever
        # happened to the revocation.
        " AND (s.allocation_id IS NULL OR EXISTS (SELECT 1 FROM allocations a"
        "      WHERE a.id = s.allocation_id AND a.state <> 'TERMINATED'))",
        (digest,),
    ).fetchone()


def _session(
    id: int,
    username: str,
    admin: bool,
    active: bool,
    display_name: str | None,
    remote: bool,
    modified_at: dt.datetime,
    agent_user_group: AgentUserLink | None,
    expires: float,
) -> tuple[User, float]:
    """A row of :func:`session_for_digest`: the user's columns and the session's expiry."""
    user = User(id, username, admin, active, display_name, remote, modified_at, agent_user_group)
    return user, float(expires)


def allocation_for_digest(conn: Conn, digest: str) -> AllocationToken | None:
    """The allocation whose token has this digest (with its state, trial, experiment and the
    experiment's owner), or None."""
    cur = conn.cursor(row_factory=class_row(AllocationToken))
    return cur.execute(
        "SELECT a.id, a.task_id, a.trial_id, a.state, a.ended_at, t.experiment_id, e.owner_id"
        " FROM allocations a LEFT JOIN trials t ON t.id = a.trial_id"
        " LEFT JOIN experiments e ON e.id = t.experiment_id WHERE a.token_hash = %s",
        (digest,),
    ).fetchone()


def allocation_owner(conn: Conn, allocation_id: str) -> int | None:
    """The user whose job the allocation runs (a trial's experiment, an interactive task, a
    checkpoint GC), or None when the job is gone."""
    return db.scalar(
        conn,
        int,
        "SELECT j.owner_id FROM allocations a JOIN jobs j ON j.id = a.job_id WHERE a.id = %s",
        (allocation_id,),
    )


#: How long a task's user session lives at most; it ends with its allocation long before.
TASK_SESSION_LIFESPAN = dt.timedelta(days=365)


def task_session_token(secret: str, allocation_id: str) -> str:
    """The ``DET_USER_TOKEN`` of an allocation: HMAC(HMAC(secret, "user-session"), its id), so
    every master process derives the same one (the container spec is built by whichever
    process answers the agent's heartbeat while it has no container for it) and only its digest is stored. Unrelated to the allocation token (HMAC(secret, id))."""
    key = hmac.new(secret.encode(), b"user-session", hashlib.sha256).digest()
    mac = hmac.new(key, allocation_id.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def task_session(conn: Conn, secret: str, allocation_id: str) -> str | None:
    """The user session of the allocation's job owner that its containers get as
    ``DET_USER_TOKEN`` (the owner's rights, nothing more), issued once: the first call stores
    it, later ones (a spec built again, e.g. after an agent restart) find it. None when the job has no owner any more.

    It authenticates only while the allocation is live (:func:`session_for_digest`), is
    revoked when the allocation ends (:func:`revoke_task_session`) and is deleted with it; a
    logout inside the task revokes it for good (a revoked row is never issued again)."""
    token = task_session_token(secret, allocation_id)
    digest = token_digest(token)
    if conn.execute("SELECT 1 FROM user_sessions WHERE token_hash = %s", (digest,)).fetchone():
        return token
    owner = allocation_owner(conn, allocation_id)
    if owner is None:
        return None
    # Two agents of one allocation may build its spec at once: the second insert does nothing.
    conn.execute(
        "INSERT INTO user_sessions (user_id, token_hash, expires_at, allocation_id, description)"
        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (
            owner,
            digest,
            dt.datetime.now(dt.UTC) + TASK_SESSION_LIFESPAN,
            allocation_id,
            f"task session of allocation {allocation_id}",
        ),
    )
    return token


def revoke_task_session(conn: Conn, allocation_id: str) -> None:
    """Ends the allocation's ``DET_USER_TOKEN`` (its allocation ended). The statement fires the
    session caches' invalidation (migration 0008) even when no row changes."""
    conn.execute(
        "UPDATE user_sessions SET revoked_at = now()"
        " WHERE allocation_id = %s AND revoked_at IS NULL",
        (allocation_id,),
    )
