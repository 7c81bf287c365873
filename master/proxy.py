"""``/proxy/<task id>/…``: a user reaches an interactive task's service (JupyterLab, TensorBoard,
a shell's SSH server) through the master, over HTTP and WebSockets.

The front (:mod:`det.master.dispatch`) hands a connection whose first request is for
``/proxy/`` to :func:`start` with the bytes read so far; a thread of its own then checks the
request head (a user's session token in ``Authorization: Bearer``, or on the task origin this
task's cookie or a single-use ticket, :mod:`det.master.task_origin`: 401 without a valid one; 403 unless the caller owns the task or is an admin; 404 for no such task;
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

from det.master import proxy_limits, proxy_origin, task_origin, ws_bridge
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


def is_task_host(host: str | None) -> bool:
    """Whether ``host`` (a ``Host`` header) is the configured task origin's."""
    if not _state or not _state[0].config.task_origin:
        return False
    return task_origin.host_task(_state[0].config, host) is not None


def wants_task_origin(head: bytes) -> bool:
    """Whether a request head arrived for the task origin's host (its connection is the
    proxy's, whatever the path: the WebUI and the API are never served there)."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"host":
            return is_task_host(value.strip().decode("latin-1"))
    return False


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
    """The caller's session token: ``Authorization: Bearer`` only. A cookie never stands for
    the session (Determined's WebUI kept it in ``auth``; a task's page could have set one)."""
    auth = head.get("authorization") or ""
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
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


def _refused(found: str) -> Refused:
    if found == "unauthenticated":
        return Refused(401, "Unauthorized", "the proxy needs a session token (det user login)")
    status, reason = {
        "not found": (404, "Not Found"),
        "forbidden": (403, "Forbidden"),
    }.get(found.split(":", 1)[0], (503, "Service Unavailable"))
    return Refused(status, reason, found.split(": ", 1)[-1])


def _session_caller(conn: Any, head: Head) -> tuple[int | None, bool]:
    token = token_of(head)
    if token is None:
        return None, False
    user = users.user_for_token(conn, token)
    if user is None:
        raise Refused(401, "Unauthorized", "missing or invalid token")
    return user.id, user.admin


def _navigation(head: Head) -> bool:
    """A browser opening the URL as a page (not a script's request)."""
    mode = (head.get("sec-fetch-mode") or "").lower()
    accept = (head.get("accept") or "").lower()
    return head.method == "GET" and (mode == "navigate" or (not mode and "text/html" in accept))


def _target_webui_origin(state: MasterState, head: Head) -> tuple[str, int, str, int | None]:
    """``/proxy/`` on the WebUI's origin. A task's page is never served here: a bearer token's
    request (the CLI, the SDK) is relayed, sandboxed and without cookies; a shell's WebSocket
    carries SSH; a browser is sent to the task's own origin (with the ticket it brought, or to
    the WebUI, which asks for one with the session it keeps)."""
    task_id = head.task_id
    with state.pool.connection() as conn:
        user_id, admin = _session_caller(conn, head)
        if user_id is None and query_value(head.target, TICKET):
            host = head.get("host")
            base = task_origin.origin(state.config, state.task_port, host, task_id)
            raise _Redirect(base + head.target)
        if user_id is None and _navigation(head):
            rest = head.target[len(PREFIX) + len(task_id) :].lstrip("/")
            raise _Redirect(f"/det/open/{task_id}?" + urllib.parse.urlencode({"path": rest}))
        found = task_services.proxy_target(conn, task_id, user_id, admin)
    if isinstance(found, str):
        raise _refused(found)
    return (*found, user_id)


def _target_task_origin(state: MasterState, head: Head) -> tuple[str, int, str, int | None]:
    """``/proxy/<task id>/`` on the task origin: a bearer token, this task's cookie, or a
    ticket (redeemed once, for the cookie)."""
    if not head.target.startswith(PREFIX.decode()) or not head.task_id:
        raise Refused(404, "Not Found", "the task origin serves only /proxy/<task id>/")
    task_id = head.task_id
    label = task_origin.host_label(state.config, head.get("host"))
    if label is not None and label != task_id:
        raise Refused(404, "Not Found", f"this origin serves task {label} only")
    site = (head.get("sec-fetch-site") or "").lower()
    if site in ("cross-site", "same-site") and not _navigation(head):
        # Another origin's page (the WebUI's, another task's) sending the task cookie along.
        raise Refused(403, "Forbidden", "a task is not reached from another origin's page")
    now = time.time()
    with state.pool.connection() as conn:
        user_id, admin = _session_caller(conn, head)
        ticket = query_value(head.target, TICKET)
        if user_id is None and ticket:
            p = task_services.verify(state, ticket, task_id, "ticket", now)
            if p is None:
                raise Refused(401, "Unauthorized", "the task's ticket is invalid or expired")
            if task_services.pass_holder(conn, p) is None:
                raise Refused(401, "Unauthorized", "the ticket's session has ended")
            used = not task_services.redeem(conn, p)
            conn.commit()  # the ticket is spent whatever happens next
            if used:
                raise Refused(401, "Unauthorized", "the task's ticket was already used")
            fresh = task_services.cookie_for(state, task_id, p, now)
            raise _Redirect(_without_ticket(head.target), _cookie(state, task_id, fresh))
        cookie = cookie_value(head, TASK_COOKIE)
        if user_id is None and cookie:
            p = task_services.verify(state, cookie, task_id, "cookie", now)
            holder = None if p is None else task_services.pass_holder(conn, p)
            if p is None or holder is None:
                raise Refused(
                    401, "Unauthorized", "the task's cookie is invalid, expired or logged out"
                )
            user_id, admin = p.user_id, holder
        found = task_services.proxy_target(conn, task_id, user_id, admin)
    if isinstance(found, str):
        raise _refused(found)
    return (*found, user_id)


#: The query parameter of an opened URL (``det notebook start``) and the cookie it becomes.
TICKET = task_origin.TICKET
TASK_COOKIE = task_origin.TASK_COOKIE


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


def _without_ticket(target: str) -> str:
    path, _, query = target.partition("?")
    kept = [(k, v) for k, v in urllib.parse.parse_qsl(query) if k != TICKET]
    return path + (f"?{urllib.parse.urlencode(kept)}" if kept else "")


def _cookie(state: MasterState, task_id: str, value: str) -> str:
    secure = "; Secure" if state.config.security.tls.enabled else ""
    if (state.config.task_origin or "").startswith("https:"):
        secure = "; Secure"
    return (
        f"{TASK_COOKIE}={value}; Path={PREFIX.decode()}{task_id}/; HttpOnly; SameSite=Lax"
        f"; Max-Age={task_services.COOKIE_SECONDS}{secure}"
    )


class _Redirect(Exception):
    """A 302: to the task's origin, or, for a ticket, the same URL without it and the task's
    cookie."""

    def __init__(self, location: str, cookie: str | None = None) -> None:
        self.location, self.cookie = location, cookie

    def answer(self) -> bytes:
        cookie = f"Set-Cookie: {self.cookie}\r\n" if self.cookie else ""
        return (
            f"HTTP/1.1 302 Found\r\nLocation: {self.location}\r\n{cookie}"
            "Cache-Control: no-store\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ).encode()


def serve(
    state: MasterState, sock: socket.socket, data: bytes, *, task_listener: bool = False
) -> None:
    """Serves one proxied connection (``data``: what the front read, the head and any more;
    ``task_listener``: it came to the task origin's own port)."""
    sock.setblocking(True)
    end = data.find(b"\r\n\r\n")
    upstream = None
    release: Callable[[], None] | None = None
    try:
        if end < 0:
            raise ValueError("no complete request head")
        head = parse_head(data[:end])
        on_task_origin = (
            task_listener or task_origin.host_task(state.config, head.get("host")) is not None
        )
        cross = proxy_origin.refusal(
            head.method, head.upgrade, head.get("host"), head.get("origin"),
            head.get("sec-fetch-site"), _own_origins(state, on_task_origin),
        )  # fmt: skip
        if cross is not None:
            raise Refused(403, "Forbidden", cross)
        if on_task_origin:
            host, port, kind, user_id = _target_task_origin(state, head)
        else:
            host, port, kind, user_id = _target_webui_origin(state, head)
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
        _relay(
            sock,
            upstream,
            task_origin.ResponseFilter(head.task_id, task_origin=on_task_origin),
            state.config.long_request_seconds(),
        )
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


def _own_origins(state: MasterState, on_task_origin: bool) -> tuple[str, ...]:
    """The origins a request's ``Origin`` may name besides its ``Host``'s: on the WebUI's
    origin the master's public URL; on the task origin the configured ``task_origin`` when it
    is one origin for all tasks (a platform in front may hand the task listener another
    ``Host`` than the browser's, say its load balancer's name; the page is still the task
    origin's own), never a ``{task}`` one (its host names the task)."""
    if not on_task_origin:
        return (state.config.url(),)
    configured = state.config.task_origin
    if configured and task_origin.TASK_LABEL not in configured:
        return (configured,)
    return ()


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


def _relay(
    client: socket.socket,
    upstream: socket.socket,
    answers: task_origin.ResponseFilter,
    seconds: float | None = None,
) -> None:
    """Relays bytes both ways, the task's response heads through ``answers``; ends after
    ``seconds`` (the platform's request time limit is near: the task's page or WebSocket
    reconnects)."""
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
            if s is upstream:
                chunk = answers.feed(chunk)
                if not chunk:
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


def start(sock: Any, data: bytes, *, task_listener: bool = False) -> None:
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
            serve(state, sock, data, task_listener=task_listener)
        finally:
            slots.release()

    threading.Thread(target=run, name="det-proxy", daemon=True).start()


#: How long the task listener waits for a request head, and for how many connections at once
#: (each waits on a thread of its own: past it a connection is closed unread, so that clients
#: that never send a head cannot pile threads up).
_HEAD_SECONDS = 30.0
_MAX_HEAD = 65536
MAX_PENDING_HEADS = 256


def _read_head(sock: socket.socket) -> bytes:
    sock.settimeout(_HEAD_SECONDS)
    data = b""
    while b"\r\n\r\n" not in data and len(data) < _MAX_HEAD:
        chunk = sock.recv(_CHUNK)
        if not chunk:
            break
        data += chunk
    return data


def serve_task_listener(listener: socket.socket, context: ssl.SSLContext | None) -> None:
    """The task origin's own port (det.master.task_origin): every connection goes to the
    proxy, one request each; nothing else of the master is served there."""

    pending = threading.BoundedSemaphore(MAX_PENDING_HEADS)

    def take(conn: socket.socket) -> None:
        try:
            if context is not None:
                conn.settimeout(_HEAD_SECONDS)
                conn = context.wrap_socket(conn, server_side=True)
            data = _read_head(conn)
        except OSError:
            with contextlib.suppress(OSError):
                conn.close()
            return
        finally:
            pending.release()
        if b"\r\n\r\n" not in data:
            _answer(conn, Refused(400, "Bad Request", "no complete request head"))
            conn.close()
            return
        start(conn, data, task_listener=True)

    while True:
        try:
            conn, _addr = listener.accept()
        except OSError:
            return
        if not pending.acquire(blocking=False):
            with contextlib.suppress(OSError):
                conn.close()
            continue
        threading.Thread(target=take, args=(conn,), name="det-task-accept", daemon=True).start()
