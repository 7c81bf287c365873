"""Agents and tasks first: where and in which order the master serves requests.

Two levels keep a flood of user requests from making an agent look lost:

**Processes.** A user's requests are CPU work in Python (listing experiments is mostly JSON
decoding and encoding): in the process that also answers heartbeats they hold the interpreter
lock, and a heartbeat or ``/info`` waits for it however early it is queued. So the master's
API processes (the *front*, which accepts every connection) serve only the cluster's own
traffic; each connection whose first request is a user's is handed over, socket and the bytes
already read, to the ``user_api_processes`` (:class:`Handoff` sends the descriptor over a Unix
datagram socket, :class:`Receiver` adopts it into that process's waitress loop). The first
request decides for the connection's lifetime: cluster traffic is a request for ``/info`` or
``/health``, a heartbeat, or one carrying an allocation token (task reports, logs, preemption
long-polls) or the agent token. A user process serves any request it gets (a connection that
changes its mind is still answered) and the user processes run at a lower CPU priority. On
HTTPS the front holds the TLS session: a user connection's decrypted bytes are relayed to the
user process over a socket pair (:class:`Relay`).

**Threads.** waitress parses requests in its event loop and queues them for its worker threads
in arrival order; :class:`PriorityDispatcher` puts the requests that keep the cluster alive
ahead of the others, in their own arrival order, so the next free thread takes the oldest of
them. (They were put at the very front once, newest first: under a burst the first to come
waited for the whole burst.) The admission limits (:mod:`det.master.api._admission`) keep user
requests from holding every thread.
"""

from __future__ import annotations

import collections
import contextlib
import hmac
import itertools
import json
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

from waitress import wasyncore
from waitress.channel import HTTPChannel
from waitress.task import Task, ThreadedTaskDispatcher

from det.master import agent_tokens
from det.master.proxy import start as proxy_start
from det.master.proxy import wants_proxy, wants_task_origin

logger = logging.getLogger(__name__)

_FIRST_PATHS = ("/info", "/health")
# A first request whose head is not complete within this many bytes is served where it came.
MAX_HEAD = 65536
# How far a relayed connection may run ahead of its reader, each way.
_RELAY_BUFFER = 1 << 20


def goes_first(path: str, headers: dict[str, str]) -> bool:
    """``headers`` as waitress keeps them (upper case, ``-`` as ``_``)."""
    return (
        path in _FIRST_PATHS
        or path.endswith("/heartbeat")
        or "GRPC_METADATA_X_ALLOCATION_TOKEN" in headers
    )


def cluster_traffic(head: bytes, agent_token: str) -> bool:
    """Whether a request (its request line and header lines, raw) is an agent's, a task's or a
    health check; a malformed one counts as such (waitress answers it where it came)."""
    lines = head.lstrip(b"\r\n").split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) < 3:
        return True
    path = parts[1].split(b"?", 1)[0]
    if path in (b"/info", b"/health") or path.endswith(b"/heartbeat"):
        return True
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"grpc-metadata-x-allocation-token":
            return True
        if name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() != b"bearer":
                continue
            if hmac.compare_digest(token.strip(), agent_token.encode()):
                return True
            presented = token.strip().decode("latin-1")
            if agent_tokens.agent_of_token(agent_token, presented) is not None:
                return True
    return False


# Waiting requests one process may park at once (each keeps a sleeping thread: about 64 KB of
# resident memory); past it a wait holds one of the ``api_threads`` as before.
MAX_PARKED = 4096


class _ClusterFirst(collections.deque[Task]):
    """waitress's queue of parsed requests, the cluster's ``ahead`` of the others: both kinds in
    arrival order. waitress takes from the left (``popleft``) and appends the others."""

    def __init__(self) -> None:
        super().__init__()
        self.ahead = 0

    def put_ahead(self, task: Task) -> None:
        self.insert(self.ahead, task)
        self.ahead += 1

    def popleft(self) -> Task:
        task = super().popleft()
        self.ahead = max(0, self.ahead - 1)
        return task

    def clear(self) -> None:
        super().clear()
        self.ahead = 0


class PriorityDispatcher(ThreadedTaskDispatcher):  # type: ignore[misc]
    """waitress's thread pool, with cluster traffic first (:func:`goes_first`) and room for
    waiting requests: a request that waits with nothing to do (a preemption long-poll, an
    agent's wait for work) *parks* (:func:`parked`), and the pool runs one more thread while it
    waits, so ``api_threads`` stay free for the requests that work. Without it, as many running
    trials as ``api_threads`` held every thread with their long-polls and heartbeats queued
    behind them until the agents were declared lost (bench/scale.py, 100 agents x 200 trials)."""

    def __init__(self) -> None:
        super().__init__()
        self.queue = _ClusterFirst()
        self.base_threads = 0
        self.parked = 0
        self._park_lock = threading.Lock()
        self._closed = False
        self._numbers = itertools.count()

    def set_thread_count(self, count: int) -> None:
        """waitress's, at the cost of what changes rather than of the pool's size: with
        hundreds of parked threads, its search for a free thread number walked them all for each
        start, and each stop woke every idle thread (``notify_all``) for one to exit. Here a
        thread's number is the next of a counter, a stop not yet taken is cancelled before a
        thread is started, and a stop wakes as many idle threads as it stops (a busy one takes
        it when it next looks for work, as in waitress)."""
        with self.lock:
            running = len(self.threads) - self.stop_count
            if running < count and self.stop_count:
                cancelled = min(self.stop_count, count - running)
                self.stop_count -= cancelled
                running += cancelled
            while running < count:
                number = next(self._numbers)
                self.threads.add(number)
                running += 1
                self.start_new_thread(self.handler_thread, number)
                self.active_count += 1
            if running > count:
                self.stop_count += running - count
                self.queue_cv.notify(running - count)

    def park(self) -> bool:
        """One more thread while the caller waits; False (nothing changed) past
        :data:`MAX_PARKED` or after shutdown."""
        with self._park_lock:
            if self._closed or self.parked >= MAX_PARKED:
                return False
            self.parked += 1
            self.set_thread_count(self.base_threads + self.parked)
            return True

    def unpark(self) -> None:
        with self._park_lock:
            self.parked -= 1
            if not self._closed:
                # One thread stops when it next looks for work (waitress's stop_count).
                self.set_thread_count(self.base_threads + self.parked)

    def shutdown(self, cancel_pending: bool = True, timeout: int = 5) -> bool:
        with self._park_lock:
            self._closed = True
        return bool(super().shutdown(cancel_pending, timeout))

    def add_task(self, task: Any) -> None:
        request = getattr(task, "request", None)
        path = getattr(request, "path", "") or ""
        headers = getattr(request, "headers", None) or {}
        if not goes_first(path, headers):
            super().add_task(task)
            return
        with self.lock:
            self.queue.put_ahead(task)
            self.queue_cv.notify()


_current: PriorityDispatcher | None = None


def dispatcher(threads: int) -> PriorityDispatcher:
    """The process's pool of ``threads`` workers (the one :func:`parked` grows)."""
    global _current
    d = PriorityDispatcher()
    d.base_threads = threads
    d.set_thread_count(threads)
    _current = d
    return d


def worker_threads(default: int) -> int:
    """This process's worker threads (a front's may be fewer than ``api_threads``:
    det.master.server.front_threads); ``default`` outside a waitress process."""
    d = _current
    return d.base_threads if d is not None else default


@contextlib.contextmanager
def parked() -> Iterator[None]:
    """Around a request's wait that holds no database connection and does no work: the
    process's pool serves the other requests with one more thread meanwhile. Outside a
    waitress process (Flask's test client) it does nothing."""
    with parking():
        yield


@contextlib.contextmanager
def parking() -> Iterator[bool]:
    """:func:`parked`, saying whether the pool did grow by a thread for the wait (False outside
    a waitress process, past :data:`MAX_PARKED`, or after shutdown: the wait then holds one of
    the pool's own threads)."""
    d = _current
    took = d.park() if d is not None else False
    try:
        yield took
    finally:
        if took and d is not None:
            d.unpark()


class RoutingMixin:
    """For a front's HTTP channel: holds back the first request until its head is complete,
    then serves the connection here, hands it to the user processes (``server.handoff``), or,
    for ``/proxy/…``, to the task proxy (:mod:`det.master.proxy`)."""

    _head = b""
    _routed = False
    server: Any

    def received(self, data: bytes) -> bool:
        if self._routed:
            return bool(super().received(data))  # type: ignore[misc]
        self._head += data
        end = self._head.find(b"\r\n\r\n")
        handoff: Handoff | None = self.server.handoff
        if end < 0 and len(self._head) < MAX_HEAD:
            return True
        if end >= 0 and (wants_proxy(self._head[:end]) or wants_task_origin(self._head[:end])):
            # A task's service (HTTP or a WebSocket): a thread relays the connection's bytes.
            self._routed = True
            self.del_channel()  # type: ignore[attr-defined]  # waitress lets go of it
            sock = self.socket  # type: ignore[attr-defined]
            proxy_start(sock, self._head)
            self._head = b""
            return True
        if end < 0 or handoff is None or cluster_traffic(self._head[:end], handoff.agent_token):
            return self.serve_here()
        handoff.pass_on(self, self._head)  # type: ignore[arg-type]
        return True

    def serve_here(self) -> bool:
        self._routed = True
        data, self._head = self._head, b""
        return bool(super().received(data))  # type: ignore[misc]


class RoutingChannel(RoutingMixin, HTTPChannel):  # type: ignore[misc]
    pass


def _message(addr: Any, head: bytes) -> bytes:
    return json.dumps(list(addr) if isinstance(addr, tuple) else addr).encode() + b"\n" + head


class Handoff(wasyncore.dispatcher):  # type: ignore[misc]
    """A front's sending end of the user processes' datagram socket. Each message is one
    connection: its descriptor, and as data the client's address and the bytes read so far.
    When the socket is full (the user processes are slow to take connections) they wait here,
    unread, and go as soon as there is room."""

    def __init__(self, sock: socket.socket, agent_token: str, map: dict[int, Any]) -> None:
        super().__init__(sock, map=map)
        self.agent_token = agent_token
        self._pending: collections.deque[tuple[Any, socket.socket, bytes]] = collections.deque()

    def readable(self) -> bool:
        return False

    def writable(self) -> bool:
        return bool(self._pending)

    def handle_write(self) -> None:
        self._drain()

    def handle_close(self) -> None:
        pass  # a datagram socket has no end; a send failing says the user processes are gone

    def pass_on(self, channel: Any, head: bytes) -> None:
        if isinstance(channel.socket, _TLS_SOCKET):
            # The TLS session stays here: the user process gets one end of a socket pair.
            ours, theirs = socket.socketpair()
            Relay(channel, ours)
            self._pending.append((None, theirs, _message(channel.addr, head)))
        else:
            channel.del_channel()  # read nothing more of it here
            self._pending.append((channel, channel.socket, _message(channel.addr, head)))
        self._drain()

    def _drain(self) -> None:
        while self._pending:
            channel, sock, msg = self._pending[0]
            try:
                socket.send_fds(self.socket, [msg], [sock.fileno()])
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # no user process is left: serve it here
                self._pending.popleft()
                logger.error("cannot hand a connection to the user processes: %s", e)
                if channel is None:
                    sock.close()  # its relay sees the end and closes the client's connection
                    continue
                channel._fileno = sock.fileno()
                channel.add_channel()
                channel.serve_here()
                continue
            self._pending.popleft()
            if channel is not None:
                channel.handle_close()  # our descriptor only: the user process has its own
            else:
                sock.close()


try:
    import ssl

    _TLS_SOCKET: type = ssl.SSLSocket
except ImportError:  # pragma: no cover - Python without ssl
    _TLS_SOCKET = type(None)


class Relay(wasyncore.dispatcher):  # type: ignore[misc]
    """Our end of a socket pair to a user process, relaying a TLS connection's decrypted bytes:
    the channel's further input goes to the pair, the pair's output to the channel's buffers
    (the channel encrypts and sends it)."""

    def __init__(self, channel: Any, sock: socket.socket) -> None:
        super().__init__(sock, map=channel._map)
        self.channel = channel
        self.out = bytearray()
        channel.relay = self

    # The channel side (called by RelayedMixin).
    def from_client(self, data: bytes) -> None:
        self.out += data

    def client_closed(self) -> None:
        self.channel = None
        if not self.out:
            self.close()

    # The pair side.
    def readable(self) -> bool:
        ch = self.channel
        return ch is not None and ch.total_outbufs_len < _RELAY_BUFFER

    def writable(self) -> bool:
        return bool(self.out)

    def handle_read(self) -> None:
        try:
            data = self.socket.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.handle_close()
        elif self.channel is not None:
            self._to_client(self.channel, data)

    @staticmethod
    def _to_client(ch: Any, data: bytes) -> None:
        with ch.outbuf_lock:
            ch.outbufs[-1].append(data)
            ch.total_outbufs_len += len(data)

    def handle_write(self) -> None:
        try:
            sent = self.socket.send(self.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.handle_close()
            return
        del self.out[:sent]
        if not self.out and self.channel is None:
            self.close()

    def handle_close(self) -> None:
        """The user process closed the connection (or the pair broke): what it sent before is
        still to be read (poll reports the hang-up with the last data) and sent, then the
        client's connection is closed."""
        ch, self.channel = self.channel, None
        if ch is not None:
            with contextlib.suppress(OSError):
                while data := self.socket.recv(1 << 20):
                    self._to_client(ch, data)
            ch.close_when_flushed = True
        self.close()


class RelayedMixin(RoutingMixin):
    """For a front's TLS channel: once relayed, its input goes to the relay."""

    relay: Relay | None = None

    def received(self, data: bytes) -> bool:
        if self.relay is not None:
            self.relay.from_client(data)
            return True
        return super().received(data)

    def readable(self) -> bool:
        if self.relay is not None:
            closing = self.will_close or self.close_when_flushed  # type: ignore[attr-defined]
            return not closing and len(self.relay.out) < _RELAY_BUFFER
        return bool(super().readable())  # type: ignore[misc]

    def handle_close(self) -> None:
        if self.relay is not None:
            self.relay.client_closed()
            self.relay = None
        super().handle_close()  # type: ignore[misc]


class Receiver(wasyncore.dispatcher):  # type: ignore[misc]
    """A user process's end of the datagram socket: each connection handed over becomes a
    channel of this process's server, fed first the bytes the front already read. All user
    processes read the same socket; the kernel gives each message to one of them."""

    def __init__(self, server: Any, sock: socket.socket) -> None:
        super().__init__(sock, map=server._map)
        self.server = server

    def writable(self) -> bool:
        return False

    def handle_close(self) -> None:
        pass

    def handle_read(self) -> None:
        try:
            data, fds, _flags, _addr = socket.recv_fds(self.socket, MAX_HEAD + 4096, 1)
        except (BlockingIOError, InterruptedError):
            return  # another user process took it
        if not fds:
            return
        conn = socket.socket(fileno=fds[0])
        conn.setblocking(False)
        line, _, head = data.partition(b"\n")
        addr = json.loads(line)
        srv = self.server
        channel = srv.channel_class(
            srv, conn, tuple(addr) if isinstance(addr, list) else addr, srv.adj, map=srv._map
        )
        channel.received(head)
