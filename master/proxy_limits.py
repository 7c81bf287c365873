"""How many proxied connections a master process serves at once, and for whom.

Three caps (the master config's ``proxy`` block): ``max_connections`` for the process, taken
before the request head is checked (each connection holds a thread of the process that also
answers the agents' heartbeats, and an unauthenticated flood must not take it down), and, once
the caller and the task are known, ``max_connections_per_user`` and
``max_connections_per_task``, so that one user's slow requests to their own task fill only
their own share: past one of these a connection gets ``429 Too Many Requests`` with
``Retry-After``; past the process's cap, ``503`` with ``Retry-After``. A caller without a
session token (a shell's WebSocket, as Determined's CLI opens it) counts by its address.

Thread-safe; the counts are this process's own (each API process has its caps).
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass

#: Seconds a refused client is told to wait (``Retry-After``).
RETRY_AFTER = 2


@dataclass(frozen=True)
class Caps:
    total: int = 1024
    per_user: int = 128
    per_task: int = 64


class Counts:
    """Connections open at once, by caller and by task."""

    def __init__(self, caps: Caps) -> None:
        self.caps = caps
        self._lock = threading.Lock()
        self._users: collections.Counter[str] = collections.Counter()
        self._tasks: collections.Counter[str] = collections.Counter()

    def enter(self, caller: str, task_id: str) -> str | None:
        """Counts a connection of ``caller`` to ``task_id``; or, without counting it, why not
        (one line naming the cap)."""
        with self._lock:
            if self._users[caller] >= self.caps.per_user:
                return (
                    f"{self._users[caller]} of your proxied connections are open, the most one"
                    f" user may have (proxy.max_connections_per_user: {self.caps.per_user});"
                    " try again shortly"
                )
            if self._tasks[task_id] >= self.caps.per_task:
                return (
                    f"task {task_id} has {self._tasks[task_id]} proxied connections open, the"
                    f" most one task may have (proxy.max_connections_per_task:"
                    f" {self.caps.per_task}); try again shortly"
                )
            self._users[caller] += 1
            self._tasks[task_id] += 1
            return None

    def leave(self, caller: str, task_id: str) -> None:
        with self._lock:
            for counter, key in ((self._users, caller), (self._tasks, task_id)):
                counter[key] -= 1
                if counter[key] <= 0:
                    del counter[key]

    def open_for(self, caller: str = "", task_id: str = "") -> tuple[int, int]:
        """(the caller's, the task's) open connections."""
        with self._lock:
            return self._users.get(caller, 0), self._tasks.get(task_id, 0)
