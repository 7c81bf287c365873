"""``/proxy/<task id>/…``: a user reaches an interactive task's service (JupyterLab, TensorBoard,
a shell's SSH server) through the master, over HTTP and WebSockets.

The front (:mod:`det.master.dispatch`) hands a connection whose first request is for
``/proxy/`` to :func:`start` with the bytes read so far; a thread of its own then checks the
request head (a user's session token, ``Authorization: Bearer`` or the ``auth`` cookie: 401
without a valid one; 403 unless the caller owns the task or is an admin; 404 for no such task;
503 while it is not ready; a shell's WebSocket may come without a token, as Determined's CLI
sends it, because what it carries is SSH, which admits only the shell's own key; 403 for a
write or a WebSocket from another origin, :mod:`det.master.proxy_origin`), connects to the
address the task's agent reported, sends the head on
without the caller's credentials, and relays bytes both ways until either side closes. waitress
cannot upgrade a connection, so a WebSocket is carried this way, as is any HTTP request. A
plain request goes on with ``Connection: close`` (each request on a connection is checked); an
upgrade keeps its connection for as long as the WebSocket lives.

The master connects to the agent's address (the one the agent reaches the master from) at the
task's port: the deploy must let the master reach the agents' task ports (docs/deploy.md).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import select
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from det.master import proxy_limits, proxy_origin, ws_bridge
from det.master.errors import MasterError
from det.master.handles import MasterState
from det.master.services import task_services, users

logger = logging.getLogger(__name__)

PREFIX = b"/proxy/"
#: The cookie Determined's WebUI keeps the session token in.
COOKIE = "auth"
_CONNECT_TIMEOUT = 10.0
_CHUNK = 65536


def wants_proxy(head: bytes) -> bool:
    """Whether a request head (request line first) is for the proxy."""
    line = head.lstrip(b"\r\n").split(b"\r\n", 1)[0]
    parts = line.split(b" ")
    return len(parts) >= 3 and parts[1].startswith(PREFIX)


@dataclass
class Head:
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]

    def get(self, name: str) -> str | None:
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    @property
    def task_id(self) -> str:
        return self.target[len(PREFIX) :].split("/", 1)[0].split("?", 1)[0]

    @property
    def upgrade(self) -> bool:
        return "upgrade" in (self.get("connection") or "").lower() and bool(self.get("upgrade"))


def parse_head(raw: bytes) -> Head:
    lines = raw.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ", 2)
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(":")
        headers.append((name.strip(), value.strip()))
    return Head(method, target, version, headers)


def token_of(head: Head) -> str | None:
    auth = head.get("authorization") or ""
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    for part in (head.get("cookie") or "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value:
            return value
    return None


def forwarded_head(head: Head, service_token: str) -> bytes:
    """The head sent to the task: the master's credentials for the service instead of the
    caller's, one request per connection unless it upgrades."""
    out = [f"{head.method} {head.target} {head.version}", f"Authorization: token {service_token}"]
    for name, value in head.headers:
        low = name.lower()
        if low == "authorization" or (low == "connection" and not head.upgrade):
            continue
        if low == "cookie":
            kept = [
                p.strip()
                for p in value.split(";")
                if p.strip().partition("=")[0] not in (COOKIE, TASK_COOKIE)
            ]
            if not kept:
                continue
            value = "; ".join(kept)
        out.append(f"{name}: {value}")
    if not head.upgrade:
        out.append("Connection: close")
    return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1")


def websocket_accept(key: str) -> bytes:
    """The 101 answer to a WebSocket handshake with ``Sec-WebSocket-Key: key`` (RFC 6455)."""
    digest = hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()
    accept = base64.b64encode(digest).decode()
    return (
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept}\r\n\r\n"
    ).encode()


class Refused(MasterError):
    def __init__(
        self, status: int, reason: str, message: str, retry_after: int | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message
        self.retry_after = retry_after


def _answer(sock: socket.socket, e: Refused) -> None:
    body = json.dumps({"error": {"error": e.message}, "message": e.message}).encode()
    retry = f"Retry-After: {e.retry_after}\r\n" if e.retry_after is not None else ""
    head = (
        f"HTTP/1.1 {e.status} {e.reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{retry}Connection: close\r\n\r\n"
    ).encode()
    with contextlib.suppress(OSError):
        sock.sendall(head + body)


def _caller(state: MasterState, conn: Any, head: Head) -> tuple[int | None, bool]:
    """(user id, admin) from the session token, or from this task's cookie; (None, False)
    when the request carries neither."""
    token = token_of(head)
    if token:
        user = users.user_for_token(conn, token)
        if user is None:
            raise Refused(401, "Unauthorized", "missing or invalid token")
        return user.id, user.admin
    ticket = query_value(head.target, TICKET) or cookie_value(head, TASK_COOKIE)
    if ticket:
        kind = "ticket" if query_value(head.target, TICKET) else "cookie"
        user_id = task_services.verify(state, ticket, head.task_id, kind, time.time())
        if user_id is None:
            raise Refused(401, "Unauthorized", "the task's ticket or cookie is invalid or expired")
        row = conn.execute(
            "SELECT admin FROM users WHERE id = %s AND active", (user_id,)
        ).fetchone()
        if row is None:
            raise Refused(401, "Unauthorized", "the ticket's user is not active")
        return user_id, bool(row["admin"])
    return None, False


def _target(state: MasterState, head: Head) -> tuple[str, int, str, int | None]:
    """(host, port, kind) of the task's service and the caller's user id (None: no token)."""
    with state.pool.connection() as conn:
        user_id, admin = _caller(state, conn, head)
        found = task_services.proxy_target(conn, head.task_id, user_id, admin)
        if user_id is not None and query_value(head.target, TICKET) and not isinstance(found, str):
            # A browser opened the CLI's URL: trade the ticket for a cookie for this task only.
            raise _Redirect(head, task_services.sign(
                state, head.task_id, user_id,
                int(time.time()) + task_services.COOKIE_SECONDS, "cookie",
            ))  # fmt: skip
    if found == "unauthenticated":
        raise Refused(401, "Unauthorized", "the proxy needs a session token (det user login)")
    if isinstance(found, str):
        status, reason = {
            "not found": (404, "Not Found"),
            "forbidden": (403, "Forbidden"),
        }.get(found.split(":", 1)[0], (503, "Service Unavailable"))
        raise Refused(status, reason, found.split(": ", 1)[-1])
    return (*found, user_id)


#: The query parameter of an opened URL (``det notebook start``) and the cookie it becomes.
TICKET = "det_ticket"
TASK_COOKIE = "det_task"


def query_value(target: str, name: str) -> str | None:
    query = target.partition("?")[2]
    values = urllib.parse.parse_qs(query).get(name)
    return values[0] if values else None


def cookie_value(head: Head, name: str) -> str | None:
    for part in (head.get("cookie") or "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name and value:
            return value
    return None


class _Redirect(Exception):
    """The answer to a ticket: the same URL without it, and this task's cookie."""

    def __init__(self, head: Head, cookie: str) -> None:
        path, _, query = head.target.partition("?")
        kept = [(k, v) for k, v in urllib.parse.parse_qsl(query) if k != TICKET]
        self.location = path + (f"?{urllib.parse.urlencode(kept)}" if kept else "")
        self.cookie = (
            f"{TASK_COOKIE}={cookie}; Path={PREFIX.decode()}{head.task_id}/; HttpOnly; SameSite=Lax"
        )

    def answer(self) -> bytes:
        return (
            f"HTTP/1.1 302 Found\r\nLocation: {self.location}\r\nSet-Cookie: {self.cookie}\r\n"
            "Content-Length: 0\r\nConnection: close\r\n\r\n"
        ).encode()


def serve(state: MasterState, sock: socket.socket, data: bytes) -> None:
    """Serves one proxied connection (``data``: what the front read, the head and any more)."""
    sock.setblocking(True)
    end = data.find(b"\r\n\r\n")
    upstream = None
    release: Callable[[], None] | None = None
    try:
        head = parse_head(data[:end])
        cross = proxy_origin.refusal(
            head.method, head.upgrade, head.get("host"), head.get("origin"),
            head.get("sec-fetch-site"), (state.config.url(),),
        )  # fmt: skip
        if cross is not None:
            raise Refused(403, "Forbidden", cross)
        host, port, kind, user_id = _target(state, head)
        if kind == "SHELL" and not (head.upgrade and head.get("sec-websocket-key")):
            raise Refused(400, "Bad Request", "a shell is reached over a WebSocket (det shell)")
        release = _admit(sock, user_id, head.task_id)
        try:
            upstream = socket.create_connection((host, port), timeout=_CONNECT_TIMEOUT)
        except OSError as e:
            raise Refused(
                502, "Bad Gateway", f"cannot reach the task at {host}:{port}: {e}"
            ) from None
        upstream.settimeout(None)
        if kind == "SHELL":
            # A TCP service (the shell's SSH server): the WebSocket's binary messages carry
            # its bytes, as Determined's master does for its CLI's ssh ProxyCommand.
            sock.sendall(websocket_accept(head.get("sec-websocket-key") or ""))
            ws_bridge.bridge(
                sock, upstream, data[end + 4 :], seconds=state.config.long_request_seconds()
            )
            return
        token = task_services.service_token(state, head.task_id)
        upstream.sendall(forwarded_head(head, token) + data[end + 4 :])
        _relay(sock, upstream, state.config.long_request_seconds())
    except Refused as e:
        _answer(sock, e)
    except _Redirect as r:
        with contextlib.suppress(OSError):
            sock.sendall(r.answer())
    except (ValueError, IndexError):
        _answer(sock, Refused(400, "Bad Request", "malformed request"))
    except Exception:
        logger.exception("proxy connection failed")
        _answer(sock, Refused(500, "Internal Server Error", "proxy error"))
    finally:
        if release is not None:
            release()
        for s in (upstream, sock):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)  # wakes a thread still reading it
                with contextlib.suppress(OSError):
                    s.close()


def _admit(sock: socket.socket, user_id: int | None, task_id: str) -> Callable[[], None]:
    """Counts the connection against its caller's and its task's caps (caller: the user, or
    the peer's address without a token); Refused 429 past one of them. Returns what uncounts
    it."""
    if user_id is not None:
        caller = f"user:{user_id}"
    else:
        try:
            caller = "address:" + str(sock.getpeername()[0])
        except (OSError, IndexError, TypeError):
            caller = "address:?"
    counts = _counts[0]
    why = counts.enter(caller, task_id)
    if why is not None:
        raise Refused(429, "Too Many Requests", why, proxy_limits.RETRY_AFTER)
    return lambda: counts.leave(caller, task_id)


def _relay(client: socket.socket, upstream: socket.socket, seconds: float | None = None) -> None:
    """Relays bytes both ways; ends after ``seconds`` (the platform's request time limit is
    near: the task's page or WebSocket reconnects)."""
    peers = {client: upstream, upstream: client}
    open_ = [client, upstream]
    deadline = None if seconds is None else time.monotonic() + seconds
    while open_:
        # TLS may hold decrypted bytes that select() cannot see.
        ready: list[socket.socket] = [
            s for s in open_ if isinstance(s, ssl.SSLSocket) and s.pending()
        ]
        if not ready:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                return
            ready, _, _ = select.select(open_, [], [], wait)
        for s in ready:
            try:
                chunk = s.recv(_CHUNK)
            except (ssl.SSLWantReadError, BlockingIOError, InterruptedError):
                continue
            except OSError:
                chunk = b""
            if not chunk:
                if s is upstream:
                    return  # the task ended the exchange: nothing more goes to the client
                open_.remove(s)
                with contextlib.suppress(OSError):
                    upstream.shutdown(socket.SHUT_WR)
                continue
            try:
                peers[s].sendall(chunk)
            except OSError:
                return


_state: list[MasterState] = []


def bind(state: MasterState | None) -> None:
    """The process's state, for the front's channels (which see only waitress's wrapped app):
    bound when the app registers the interactive tasks' routes (an app without one binds
    nothing); the caps are the state's config's (``proxy``, see det.master.proxy_limits)."""
    global MAX_CONNECTIONS, _slots
    if state is not None:
        _state[:] = [state]
        conf = state.config.proxy
        caps = proxy_limits.Caps(
            conf.max_connections, conf.max_connections_per_user, conf.max_connections_per_task
        )
        if caps != _counts[0].caps:
            MAX_CONNECTIONS = caps.total
            _slots = threading.BoundedSemaphore(caps.total)
            _counts[0] = proxy_limits.Counts(caps)


#: Proxied connections served at once by a master process (``proxy.max_connections``). Each
#: holds a thread of the process that also answers the agents' heartbeats, and the head is read
#: before anyone is known, so the cap keeps a flood of (even unauthenticated) proxy connections
#: from taking the process down; the per-user and per-task caps (taken once the caller is
#: known) keep one user from filling it.
MAX_CONNECTIONS = proxy_limits.Caps().total
_slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
_counts = [proxy_limits.Counts(proxy_limits.Caps())]


def start(sock: Any, data: bytes) -> None:
    """Takes over a connection the front read ``data`` of (see the module's docstring)."""
    if not _state:
        _answer(sock, Refused(503, "Service Unavailable", "the proxy is not set up"))
        sock.close()
        return
    slots = _slots  # bind() may replace it; this one is released
    if not slots.acquire(blocking=False):
        _answer(
            sock,
            Refused(
                503,
                "Service Unavailable",
                f"the proxy is serving {MAX_CONNECTIONS} connections, its most"
                " (proxy.max_connections); try again shortly",
                proxy_limits.RETRY_AFTER,
            ),
        )
        sock.close()
        return
    state = _state[0]

    def run() -> None:
        try:
            serve(state, sock, data)
        finally:
            slots.release()

    threading.Thread(target=run, name="det-proxy", daemon=True).start()
