"""Preemption long-polls wait for PostgreSQL's word instead of reading their allocation's row
every quarter of a second.

A trigger (migration 0028) sends ``NOTIFY det_preempt, '<allocation id>'`` when an allocation's
``preempt_requested`` turns true or it ends (``TERMINATED``), whoever changes it: the control
loop, a user's kill or pause, another master. Each API process keeps one listening connection
(:class:`Waiters`, started by the first long-poll it serves) and wakes the requests waiting on
that allocation. A long-poll registers before it reads the row, so a change committed between
its read and its wait still wakes it.

While the listening connection is down (a database restart), waiters fall back to reading the
row every :data:`POLL_SECONDS`; while it is up, they still read it every
:data:`RECHECK_SECONDS`, in case a notification was lost with a connection.
"""

from __future__ import annotations

import logging
import os
import threading

import psycopg

logger = logging.getLogger(__name__)

CHANNEL = "det_preempt"
POLL_SECONDS = 0.25
RECHECK_SECONDS = 5.0


class Waiters:
    """One process's waiting long-polls by allocation id, woken by a listening thread."""

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo
        self._lock = threading.Lock()
        self._waiting: dict[str, set[threading.Event]] = {}
        self._listening = False
        self._started = False
        self._stop = threading.Event()

    @property
    def listening(self) -> bool:
        return self._listening

    def register(self, allocation_id: str) -> threading.Event:
        """An event set at the next notification for ``allocation_id`` (call before reading the
        row; :meth:`unregister` when done)."""
        event = threading.Event()
        with self._lock:
            self._waiting.setdefault(allocation_id, set()).add(event)
            if not self._started:
                self._started = True
                threading.Thread(
                    target=self._listen_forever, name="det-preempt-listener", daemon=True
                ).start()
        return event

    def unregister(self, allocation_id: str, event: threading.Event) -> None:
        with self._lock:
            events = self._waiting.get(allocation_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiting[allocation_id]

    def wait_seconds(self) -> float:
        """How long a waiter may sleep before reading its row again."""
        return RECHECK_SECONDS if self._listening else POLL_SECONDS

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
        """Stop listening (within RECHECK_SECONDS); waiters fall back to reading their rows."""
        self._stop.set()

    def _listen_forever(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self._listening = True
                    self.wake(None)  # anything that changed while nobody listened
                    while not self._stop.is_set():
                        for n in conn.notifies(timeout=RECHECK_SECONDS):
                            self.wake(n.payload)
                        conn.execute("SELECT 1")  # an idle connection proven alive
            except psycopg.Error as e:
                logger.warning("preemption listener lost its connection (%s); retrying", e)
            finally:
                self._listening = False
                self.wake(None)
            self._stop.wait(1.0)


_waiters: tuple[int, Waiters] | None = None
_guard = threading.Lock()


def waiters(conninfo: str) -> Waiters:
    """This process's :class:`Waiters` (a forked process makes its own)."""
    global _waiters
    with _guard:
        if _waiters is None or _waiters[0] != os.getpid():
            _waiters = (os.getpid(), Waiters(conninfo))
        return _waiters[1]
