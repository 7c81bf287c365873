"""Admission: no number of user requests can take the capacity agents and tasks need.

Agents (heartbeats) and tasks (metric, checkpoint and log reports) are never refused here.
User requests are counted per API process against limits derived from ``api_threads``:

- quick requests in flight per user: ``api_threads // 16`` (8 of 128);
- waiting requests (a preemption long-poll with ``timeout_seconds > 0``, a log stream with
  ``follow=true``), counted apart so a user's waits never block their quick requests: per user
  ``api_threads // 16`` (8), all users ``api_threads // 2`` (64);
- both kinds, all users together: ``api_threads - api_threads // 8`` (112 of 128), so at least
  an eighth of the threads is always left to agents, tasks and ``/info``.

A user's requests are CPU work in one Python process: eight at a time already keep a core
busy, and more only make everyone's answers (``/info``, heartbeats) wait for the interpreter.

A request over a limit is answered at once with 429 and ``Retry-After: 1``; it holds a thread
only for that answer. Unauthenticated routes (``/info``, ``/health``, login) are not counted:
they are cheap, and login has its own throttling. The counters live in the process (they
describe what it is doing right now; a restart correctly starts them at zero).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from det.master.errors import TooManyRequests


@dataclass(frozen=True)
class Limits:
    per_user: int
    users_total: int
    waits_per_user: int
    waits_total: int

    @staticmethod
    def for_threads(api_threads: int) -> Limits:
        reserve = max(1, api_threads // 8)
        return Limits(
            per_user=max(1, api_threads // 16),
            users_total=max(1, api_threads - reserve),
            waits_per_user=max(1, api_threads // 16),
            waits_total=max(1, api_threads // 2),
        )


@dataclass(frozen=True)
class Ticket:
    user_id: int
    waiting: bool


class Admission:
    """Thread-safe counters of the user requests a process is serving."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self._by_user: dict[int, int] = {}
        self._waits_by_user: dict[int, int] = {}
        self._total = 0
        self._waits = 0

    def admit(self, user_id: int, *, waiting: bool) -> Ticket:
        lim = self.limits
        with self._lock:
            if self._total >= lim.users_total:
                raise _busy("the master is serving as many user requests as it allows")
            if waiting:
                if self._waits >= lim.waits_total:
                    raise _busy("the master holds as many waiting requests as it allows")
                if self._waits_by_user.get(user_id, 0) >= lim.waits_per_user:
                    raise _busy(f"more than {lim.waits_per_user} waiting requests of this user")
                self._waits += 1
                self._waits_by_user[user_id] = self._waits_by_user.get(user_id, 0) + 1
            else:
                if self._by_user.get(user_id, 0) >= lim.per_user:
                    raise _busy(f"more than {lim.per_user} requests of this user in flight")
                self._by_user[user_id] = self._by_user.get(user_id, 0) + 1
            self._total += 1
        return Ticket(user_id, waiting)

    def release(self, ticket: Ticket) -> None:
        with self._lock:
            self._total -= 1
            if ticket.waiting:
                self._waits -= 1
                _decrement(self._waits_by_user, ticket.user_id)
            else:
                _decrement(self._by_user, ticket.user_id)

    def in_flight(self) -> tuple[int, int]:
        """(user requests, waiting user requests) being served now."""
        with self._lock:
            return self._total, self._waits


def _decrement(counts: dict[int, int], key: int) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


def _busy(reason: str) -> TooManyRequests:
    return TooManyRequests(f"too many requests: {reason}; retry in a moment", retry_after=1)
