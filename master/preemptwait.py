"""Long-polls wait for PostgreSQL's word: a task's preemption long-poll instead of reading its
allocation's row every quarter of a second, an agent's wait for work instead of its next
heartbeat.

A trigger (migration 0028) sends ``NOTIFY det_preempt, '<allocation id>'`` when an allocation's
``preempt_requested`` turns true or it ends (``TERMINATED``), whoever changes it: the control
loop, a user's kill or pause, another master. Each API process keeps one listening connection
(:class:`Waiters`, started by the first long-poll it serves) and wakes the requests waiting on
that allocation. A long-poll registers before it reads the row, so a change committed between
its read and its wait still wakes it.

While the listening connection is down (a database restart), waiters fall back to reading the
row every :data:`POLL_SECONDS`. While it is up, a waiter reads its row again only when woken: by
its allocation's notification, or by the listener losing its connection, the one way a
notification is lost (PostgreSQL delivers each to every session listening when it commits).
The listener proves an idle connection alive every :data:`PROBE_SECONDS` (over TCP, a probe
unanswered for :data:`LISTENER_TCP`'s ``tcp_user_timeout`` fails) and, when it fails, wakes
every waiter before it listens again, then once more when it does. A trial's long-poll
(30 s a cycle) reads its row when it starts and when it ends: at 2,000 trials the periodic
re-read every 5 s it replaced was 400 statements a second (``bench/scale.py --routes``: the
long-poll's app call 1.7-2.0 ms, the dearest of a trial's requests).

Agents (:data:`AGENT_CHANNEL`, migration 0033): ``NOTIFY det_agent, '<agent id>'`` when an
allocation is placed on the agent or one of its allocations is to be killed; the agent's
``GET /api/v1/agents/<id>/changes`` answers at once and the agent heartbeats (a missed word costs
what it cost before: the agent's next regular heartbeat).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import zlib

import psycopg
from psycopg.conninfo import make_conninfo

from det.master import db
from det.master.db.connection import notifications
from det.master.slimsync import Wakeup

logger = logging.getLogger(__name__)

CHANNEL = "det_preempt"
AGENT_CHANNEL = "det_agent"
POLL_SECONDS = 0.25
PROBE_SECONDS = 5.0
#: A waiter's sleep while the listener listens: longer than any long-poll, so it ends when the
#: waiter is woken or its request's time is up (finite: ``Event.wait`` refuses infinity).
UNTIL_WOKEN = 3600.0
#: libpq's options for the listening connection (ignored over a Unix socket): a connection whose
#: peer is gone (a network that drops packets silently) fails its next probe within 10 s
#: instead of the kernel's retransmissions' 15 minutes, and an idle one is checked by the kernel.
LISTENER_TCP = {
    "tcp_user_timeout": 10_000,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 3,
    "keepalives_count": 3,
}


def spread_wait(key: str, asked: float, cap: float, now: float) -> float:
    """Seconds a long-poll asked for ``asked`` seconds waits, when the server cuts waits at
    ``cap``: ``asked`` below the cap; at or past it, until the first instant at least half a cap
    from ``now`` (a wall-clock time) at which ``key``'s phase comes round in a cycle of one cap
    (a stable hash of the key), never past ``asked``: between half a cap and a cap and a half.

    Trials started together ask together and, all cut at the cap, asked again together at every
    cap: 1,400 trials whose start took 10 s answered up to 380 polls a second in bursts every
    30 s (``bench/scale.py``, 700 x 1,400; each poll a token check, a read and a park). With each
    key at its own phase, the first answer puts every poller at its phase, however they started,
    and from then on each asks once a cap, as before, at its own instant: the polls are spread
    evenly over the cycle. A client whose wait ends before its timeout asks again (the harness
    and Determined's client loop on ``preempt: false``)."""
    if asked < cap:
        return asked
    phase = (zlib.crc32(key.encode()) % 100_000) / 100_000 * cap
    earliest = now + cap / 2
    answer_at = math.ceil((earliest + phase) / cap) * cap - phase
    return min(answer_at - now, asked)


class Waiters:
    """One process's waiting long-polls by id (an allocation's, an agent's), woken by a thread
    listening on ``channel``."""

    def __init__(self, conninfo: str, channel: str = CHANNEL, *, rereads: bool = True) -> None:
        """``rereads``: the waiters read a row, so they are woken when the listener starts or
        stops too (what changed meanwhile was not heard); agents' waits are not (their
        heartbeat reads their work)."""
        self._conninfo = conninfo
        self._channel = channel
        self._rereads = rereads
        self._lock = threading.Lock()
        self._waiting: dict[str, set[Wakeup]] = {}
        self._listening = False
        self._started = False
        self._stop = threading.Event()

    @property
    def listening(self) -> bool:
        return self._listening

    def register(self, allocation_id: str, event: Wakeup | None = None) -> Wakeup:
        """An event set at the next notification for ``allocation_id`` (call before reading the
        row; :meth:`unregister` when done): ``event`` (a parking request's
        det.master.deferred.Resume), or a new one."""
        event = event if event is not None else Wakeup()
        with self._lock:
            self._waiting.setdefault(allocation_id, set()).add(event)
            if not self._started:
                self._started = True
                threading.Thread(
                    target=self._listen_forever, name=f"{self._channel}-listener", daemon=True
                ).start()
        return event

    def unregister(self, allocation_id: str, event: Wakeup) -> None:
        with self._lock:
            events = self._waiting.get(allocation_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiting[allocation_id]

    def wait_seconds(self) -> float:
        """How long a waiter may sleep before reading its row again: until it is woken while
        the listener listens (:data:`UNTIL_WOKEN`), else :data:`POLL_SECONDS`."""
        return UNTIL_WOKEN if self._listening else POLL_SECONDS

    def wake(self, allocation_id: str | None) -> None:
        """Wake the waiters of ``allocation_id`` (None: everyone)."""
        with self._lock:
            if allocation_id is None:
                events = [e for es in self._waiting.values() for e in es]
            else:
                events = list(self._waiting.get(allocation_id, ()))
        for e in events:
            e.set()

    def close(self) -> None:
        """Stop listening (within PROBE_SECONDS); waiters fall back to reading their rows."""
        self._stop.set()

    def _listen_forever(self) -> None:
        while not self._stop.is_set():
            try:
                with db.connect(make_conninfo(self._conninfo, **LISTENER_TCP)) as conn:
                    conn.execute(f"LISTEN {self._channel}")
                    if self._rereads:
                        self.wake(None)  # anything that changed while nobody listened
                    # Only now: a waiter that sees it listening has had that wake already.
                    self._listening = True
                    while not self._stop.is_set():
                        for n in notifications(conn, PROBE_SECONDS):
                            self.wake(n.payload)
                        conn.execute("SELECT 1")  # an idle connection proven alive
            except psycopg.Error as e:
                logger.warning("%s listener lost its connection (%s); retrying", self._channel, e)
            finally:
                self._listening = False
                if self._rereads:
                    self.wake(None)
            self._stop.wait(1.0)


_waiters: dict[str, tuple[int, Waiters]] = {}
_guard = threading.Lock()


def waiters(conninfo: str, channel: str = CHANNEL) -> Waiters:
    """This process's :class:`Waiters` of ``channel`` (a forked process makes its own)."""
    with _guard:
        found = _waiters.get(channel)
        if found is None or found[0] != os.getpid():
            made = Waiters(conninfo, channel, rereads=channel != AGENT_CHANNEL)
            found = _waiters[channel] = (os.getpid(), made)
        return found[1]
