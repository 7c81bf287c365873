"""The services of interactive tasks (a notebook's JupyterLab, a shell's SSH server): where
they listen, when they are ready, what the master's proxy may forward to, and the secrets that
keep everyone but the master (and a shell's owner) out of them. See det.master.proxy."""

from __future__ import annotations

import hmac
import re
import secrets
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from det.common import ports
from det.common.jsontypes import JSONObject
from det.master import db, states
from det.master.db import Conn
from det.master.expconf.task import KIND_NAMES
from det.master.handles import MasterState
from det.master.rows.tasks import TaskData
from det.master.services import containers

#: The kinds that serve something through the proxy.
SERVED = frozenset({"NOTEBOOK", "TENSORBOARD", "SHELL"})


def service_token(st: MasterState, task_id: str) -> str:
    """The secret a task's service admits the master's proxy with (only the master knows it:
    the service's port on the agent admits no one else)."""
    return containers.allocation_token(st, "service:" + task_id)


def service_port(port_offset: int) -> int:
    """Where a task's service listens on its agent (host networking): the first task service
    port plus the allocation's DET_UNIQUE_PORT_OFFSET, as Determined offsets its tasks' ports
    (det.common.ports; the offset is unique among the host's live allocations)."""
    return ports.FIRST_TASK_SERVICE_PORT + port_offset % ports.TASK_SERVICE_PORT_COUNT


@dataclass(frozen=True)
class _Served:
    task_id: str
    placement: JSONObject | None
    state: str
    proxy_address: str | None


@dataclass(frozen=True)
class _Addresses:
    addresses: list[str]


@dataclass(frozen=True)
class _Proxied:
    kind: str
    owner_id: int
    state: str
    proxy_address: str | None
    username: str


def service_ready(conn: Conn, allocation_id: str, port: int) -> None:
    """The agent found the task's service accepting connections: the proxy may forward to it
    (the agent's address, the one it reaches the master from, at ``port``)."""
    row = db.fetch_row(
        conn,
        _Served,
        "SELECT a.task_id, a.placement, a.state, n.proxy_address FROM allocations a"
        " JOIN ntsc_tasks n ON n.id = a.task_id WHERE a.id = %s",
        (allocation_id,),
    )
    if row is None or row.state == states.TERMINATED or not row.placement:
        return
    agent_id = next(iter(row.placement))
    agent = db.fetch_row(
        conn, _Addresses, "SELECT addresses FROM agents WHERE id = %s", (agent_id,)
    )
    addresses = (agent.addresses if agent else None) or []
    if not addresses:
        return
    address = f"{addresses[0]}:{int(port)}"
    if row.proxy_address != address:
        conn.execute(
            "UPDATE ntsc_tasks SET proxy_address = %s, last_activity = now() WHERE id = %s",
            (address, row.task_id),
        )
        states.record_event(conn, "task", row.task_id, "ready", f"serving on {address}")


def key_pair() -> TaskData:
    """A shell's SSH key pair (OpenSSH formats): the public half goes to its server, the
    private half to its owner's CLI."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    return {"privateKey": private, "publicKey": public}


def proxy_target(
    conn: Conn, task_id: str, user_id: int | None, admin: bool
) -> tuple[str, int, str] | str:
    """Where the proxy forwards a request of user ``user_id`` for task ``task_id``, or why not
    (``"not found: …"``, ``"forbidden: …"``, ``"unavailable: …"``, ``"unauthenticated"``).
    Counts as activity. Without a user (no token) only a shell is reached: its SSH server
    admits only the shell's key, which only its owner and admins are given."""
    row = db.fetch_row(
        conn,
        _Proxied,
        "SELECT n.kind, n.owner_id, n.state, n.proxy_address, u.username FROM ntsc_tasks n"
        " JOIN users u ON u.id = n.owner_id WHERE n.id = %s",
        (task_id,),
    )
    if user_id is None and (row is None or row.kind != "SHELL"):
        return "unauthenticated"
    if row is None:
        return f"not found: no task {task_id}"
    name = f"{KIND_NAMES[row.kind].lower()} {task_id}"
    if user_id is not None and not admin and row.owner_id != user_id:
        owner = row.username
        return f"forbidden: {name} belongs to {owner}; only its owner or an admin may open it"
    if row.state == states.TERMINATED:
        return f"unavailable: {name} has ended"
    if not row.proxy_address:
        return f"unavailable: {name} is not ready yet"
    conn.execute("UPDATE ntsc_tasks SET last_activity = now() WHERE id = %s", (task_id,))
    host, _, port = str(row.proxy_address).rpartition(":")
    return host, int(port), str(row.kind)


#: How long a ticket in an opened URL is good for, and the browser cookie it becomes.
TICKET_SECONDS = 60
COOKIE_SECONDS = 24 * 3600


@dataclass(frozen=True)
class Pass:
    """What a ticket or a task cookie carries: for whom, from which of their sessions (the
    pass dies with it: logout, a password change, expiry), until when, and a ticket's nonce
    (each is redeemed once)."""

    user_id: int
    session_id: int
    expires: int
    nonce: str = ""


def sign(st: MasterState, task_id: str, kind: str, p: Pass) -> str:
    """A credential for one task, one user's session, until ``p.expires`` (Unix time): ``kind``
    ``ticket`` (in a URL a browser opens) or ``cookie`` (what the proxy sets in exchange)."""
    fields = f"{p.user_id}.{p.session_id}.{p.expires}" + (f".{p.nonce}" if p.nonce else "")
    mac = containers.allocation_token(st, f"{kind}.{task_id}.{fields}")
    return f"{fields}.{mac}"


def verify(st: MasterState, value: str, task_id: str, kind: str, now: float) -> Pass | None:
    """What a ``sign``ed value carries, if it is for this task and kind and has not expired
    (whether its session still lives and a ticket is still unused is the caller's to check)."""
    parts = value.split(".")
    if len(parts) != (5 if kind == "ticket" else 4) or not all(x.isdigit() for x in parts[:3]):
        return None
    nonce = parts[3] if kind == "ticket" else ""
    if kind == "ticket" and not re.fullmatch(r"[0-9a-f]{32}", nonce):
        return None
    p = Pass(int(parts[0]), int(parts[1]), int(parts[2]), nonce)
    if p.expires < now:
        return None
    return p if hmac.compare_digest(sign(st, task_id, kind, p), value) else None


def new_ticket(st: MasterState, task_id: str, user_id: int, session_id: int, now: float) -> str:
    p = Pass(user_id, session_id, int(now) + TICKET_SECONDS, secrets.token_hex(16))
    return sign(st, task_id, "ticket", p)


def cookie_for(st: MasterState, task_id: str, ticket: Pass, now: float) -> str:
    """The task cookie a redeemed ticket becomes: the same session, a day at most."""
    p = Pass(ticket.user_id, ticket.session_id, int(now) + COOKIE_SECONDS)
    return sign(st, task_id, "cookie", p)


def redeem(conn: Conn, ticket: Pass) -> bool:
    """Marks a ticket used; False when it was already (a ticket opens a page once)."""
    conn.execute("DELETE FROM proxy_ticket_uses WHERE expires_at < now() - interval '1 minute'")
    return db.exists(
        conn,
        "INSERT INTO proxy_ticket_uses (nonce, expires_at) VALUES (%s, to_timestamp(%s))"
        " ON CONFLICT DO NOTHING RETURNING nonce",
        (ticket.nonce, ticket.expires),
    )


def pass_holder(conn: Conn, p: Pass) -> bool | None:
    """Whether the pass's user is an admin, while its session lives (not logged out, revoked
    by a password change or expired) and the user is active; None otherwise."""
    return db.scalar(
        conn,
        bool,
        "SELECT u.admin FROM user_sessions s JOIN users u ON u.id = s.user_id"
        " WHERE s.id = %s AND s.user_id = %s AND s.revoked_at IS NULL AND s.expires_at > now()"
        " AND u.active",
        (p.session_id, p.user_id),
    )


def session_id(conn: Conn, token_digest: str) -> int | None:
    """The id of the live session whose token has this digest."""
    return db.scalar(
        conn,
        int,
        "SELECT id FROM user_sessions WHERE token_hash = %s AND revoked_at IS NULL"
        " AND expires_at > now()",
        (token_digest,),
    )
