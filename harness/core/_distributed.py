"""Collective operations between the workers of one task, through the chief, over plain TCP.

Topology: a star per group. The group's root (global rank 0, or local rank 0 for the node-local
group) listens; every other member connects once and keeps the connection. ``gather`` sends
every member's object to the root; ``broadcast`` sends the root's object to every member;
``allgather`` is both. Objects are pickled: the peers are the processes of one allocation, which
already trust each other with the same code and credentials.

Calls are collective: every member must make the same sequence of calls. Not thread-safe: call
from one thread per process.
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import struct
import time
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_PORT = 12360
_HEADER = struct.Struct("!Q")


def _send(sock: socket.socket, obj: Any) -> None:
    data = pickle.dumps(obj)
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("peer closed the connection during a collective operation")
        buf += chunk
    return bytes(buf)


def _recv(sock: socket.socket) -> object:
    """The next object a peer sent (unpickled: whatever it was)."""
    (n,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    return pickle.loads(_recv_exact(sock, n))


class _Star:
    """One group: member 0 is the root."""

    def __init__(
        self,
        rank: int,
        size: int,
        host: str,
        port: int,
        timeout: float,
        server: socket.socket | None = None,
    ) -> None:
        """``server``: the root's listening socket, already bound (else it binds ``port``)."""
        self.rank = rank
        self.size = size
        self._peers: dict[int, socket.socket] = {}
        self._root: socket.socket | None = None
        if size == 1:
            if server is not None:
                server.close()
            return
        if rank == 0:
            self._accept_all(server or socket.create_server(("", port)), timeout)
        else:
            self._connect(host, port, timeout)

    def _accept_all(self, listening: socket.socket, timeout: float) -> None:
        with listening as server:
            server.settimeout(timeout)
            while len(self._peers) < self.size - 1:
                conn, _ = server.accept()
                conn.settimeout(None)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                peer_rank = _recv(conn)
                if not isinstance(peer_rank, int):
                    raise ConnectionError(f"a peer sent {type(peer_rank).__name__}, not its rank")
                self._peers[peer_rank] = conn

    def _connect(self, host: str, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _send(sock, self.rank)
        self._root = sock

    def gather(self, obj: Any) -> list[Any] | None:
        if self.size == 1:
            return [obj]
        if self._root is not None:
            _send(self._root, obj)
            return None
        return [obj] + [_recv(self._peers[r]) for r in range(1, self.size)]

    def broadcast(self, obj: Any) -> Any:
        if self.size == 1:
            return obj
        if self._root is not None:
            return _recv(self._root)
        for r in range(1, self.size):
            _send(self._peers[r], obj)
        return obj

    def allgather(self, obj: Any) -> list[Any]:
        out: list[Any] = self.broadcast(self.gather(obj))
        return out

    def close(self) -> None:
        for s in self._peers.values():
            s.close()
        if self._root is not None:
            self._root.close()
        self._peers.clear()
        self._root = None


class DistributedContext:
    """Ranks and collectives of a multi-process task.

    ``rank``/``size`` span every worker; ``local_*`` the workers on this machine; ``cross_*`` the
    machines. ``chief_ip`` is the address of rank 0 (needed only when ``cross_size > 1``).
    The global group listens on ``port + port_offset`` on the chief (default port 12360; the
    offset is ``DET_UNIQUE_PORT_OFFSET``); the node-local group, only when a machine does not
    hold every worker, on a port the kernel chooses on each machine's local chief (on
    127.0.0.1), sent to its members through the global group.
    """

    def __init__(
        self,
        *,
        rank: int,
        size: int,
        local_rank: int,
        local_size: int,
        cross_rank: int,
        cross_size: int,
        chief_ip: str | None = None,
        port: int | None = None,
        port_offset: int = 0,
        timeout: float = 300.0,
    ) -> None:
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.cross_rank = cross_rank
        self.cross_size = cross_size
        if cross_size > 1 and not chief_ip:
            raise ValueError("chief_ip is required when workers span several machines")
        base = (port if port is not None else DEFAULT_PORT) + port_offset
        self._global = _Star(rank, size, chief_ip or "127.0.0.1", base, timeout)
        if local_size == size:
            self._local = self._global
        else:
            # Each container's local group listens where the kernel puts it (two containers of
            # one task may share a host's network: one fixed port would be bound twice); its
            # members learn the port through the global group.
            server = socket.create_server(("127.0.0.1", 0)) if local_rank == 0 else None
            mine = server.getsockname()[1] if server is not None else None
            ports = self._global.allgather((cross_rank, mine))
            local_port = next(p for c, p in ports if c == cross_rank and p is not None)
            self._local = _Star(
                local_rank, local_size, "127.0.0.1", local_port, timeout, server=server
            )

    @classmethod
    def from_torch_distributed(
        cls, chief_ip: str | None = None, port: int | None = None
    ) -> DistributedContext:
        """Build from the variables ``torchrun`` sets (RANK, WORLD_SIZE, LOCAL_RANK,
        LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR). The port offset comes from
        ``DET_UNIQUE_PORT_OFFSET`` so two tasks on one machine do not collide."""
        env = os.environ
        size = int(env["WORLD_SIZE"])
        local_size = int(env["LOCAL_WORLD_SIZE"])
        cross_size = max(1, size // local_size)
        return cls(
            rank=int(env["RANK"]),
            size=size,
            local_rank=int(env["LOCAL_RANK"]),
            local_size=local_size,
            cross_rank=int(env.get("GROUP_RANK", "0")),
            cross_size=cross_size,
            chief_ip=chief_ip or (env.get("MASTER_ADDR") if cross_size > 1 else None),
            port=port,
            port_offset=int(env.get("DET_UNIQUE_PORT_OFFSET", "0") or 0),
        )

    @classmethod
    def from_deepspeed(cls, chief_ip: str | None = None) -> DistributedContext:
        """DeepSpeed's launcher sets the same variables as torchrun."""
        return cls.from_torch_distributed(chief_ip)

    def get_rank(self) -> int:
        return self.rank

    def get_size(self) -> int:
        return self.size

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_local_size(self) -> int:
        return self.local_size

    def get_cross_rank(self) -> int:
        return self.cross_rank

    def get_cross_size(self) -> int:
        return self.cross_size

    def gather(self, obj: Any) -> list[Any] | None:
        """Every worker's object, in rank order, on the chief; None elsewhere."""
        return self._global.gather(obj)

    def allgather(self, obj: Any) -> list[Any]:
        return self._global.allgather(obj)

    def broadcast(self, obj: Any) -> Any:
        """The chief's object, on every worker."""
        return self._global.broadcast(obj)

    def gather_local(self, obj: Any) -> list[Any] | None:
        return self._local.gather(obj)

    def allgather_local(self, obj: Any) -> list[Any]:
        return self._local.allgather(obj)

    def broadcast_local(self, obj: Any) -> Any:
        return self._local.broadcast(obj)

    def close(self) -> None:
        self._global.close()
        if self._local is not self._global:
            self._local.close()


class DummyDistributedContext(DistributedContext):
    """A single worker: every collective returns immediately."""

    def __init__(self) -> None:
        super().__init__(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1)
