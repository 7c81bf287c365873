"""Session lookups cached in each API process, revoked in every process before the revoking
request is answered.

Every user request names a session token; looking it up is a round trip to PostgreSQL (a
fifth of a listed page's time on a busy master). Each process keeps what it found, by the
token's digest, for at most ``session_cache_seconds`` and never past the session's expiry.

**Revocation.** Any change to ``users`` or ``user_sessions`` (logout, a revoked access token, a
password change, deactivation, an admin flag, a rename, a deletion) sends ``NOTIFY det_auth``
from a trigger (migration 0007), so no code path can forget it. An :class:`Epoch`, a counter in
memory shared by all of a master's processes (created before they fork), moves on at each
notification, and a cached entry counts only under the epoch it was read in:

* The process that commits the change gets its own notification as part of the commit (each
  pooled connection listens: :meth:`Epoch.watch`), so the epoch has moved, in every process of
  this master, before the revoking request is answered: the very next request with that token,
  whichever process serves it, looks it up again and is refused.
* Other masters on the same database learn of it from a listening connection
  (:func:`listen_forever`, one thread per master), within the notification's delivery time.
  While that connection is down the cache is not used at all; when it is back the epoch moves
  on (what it missed is forgotten).

An entry records the epoch read *before* its lookup, so a lookup that raced a revocation's
commit is stored under an epoch that is already gone.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import psycopg

from det.master import db

logger = logging.getLogger(__name__)

CHANNEL = "det_auth"
# How often an idle listening connection is proven alive.
_PROBE_SECONDS = 5.0
_MAX_ENTRIES = 10_000

T = TypeVar("T")


class Epoch:
    """A counter in shared memory: every process forked after it was made sees each move."""

    def __init__(self) -> None:
        self._value = multiprocessing.RawValue("Q", 0)
        self._listening = multiprocessing.RawValue("b", 0)
        self._lock = multiprocessing.Lock()

    def read(self) -> int:
        return int(self._value.value)

    def bump(self) -> None:
        # A process killed while holding the lock must not stop the others from revoking.
        locked = self._lock.acquire(timeout=1.0)
        try:
            self._value.value += 1
        finally:
            if locked:
                self._lock.release()

    @property
    def listening(self) -> bool:
        """Whether this master hears other masters' revocations (the cache is used only then)."""
        return bool(self._listening.value)

    def set_listening(self, value: bool) -> None:
        self._listening.value = 1 if value else 0

    def watch(self, conn: psycopg.Connection[Any]) -> None:
        """A pool's ``configure``: the connection listens, and a notification of its own
        transaction (delivered with its commit) moves the epoch on at once."""
        conn.execute(f"LISTEN {CHANNEL}")
        conn.commit()
        own = conn.info.backend_pid

        def on_notify(n: psycopg.Notify) -> None:
            # Others' notifications wait here until this connection is next used: the
            # listening thread has already acted on them.
            if n.channel == CHANNEL and n.pid == own:
                self.bump()

        conn.add_notify_handler(on_notify)


class SessionCache(Generic[T]):
    """One process's cache: token digest -> (value, epoch, deadline)."""

    def __init__(self, epoch: Epoch, ttl: float, *, clock: Callable[[], float] = time.time):
        self.epoch = epoch
        self.ttl = ttl
        self._clock = clock
        self._entries: dict[str, tuple[T, int, float]] = {}
        self._lock = threading.Lock()

    def lookup(self, digest: str, load: Callable[[], tuple[T, float] | None]) -> T | None:
        """The cached value of ``digest``, or ``load()``'s (value, expiry as a Unix time),
        cached. None (not cached) when ``load`` finds nothing."""
        usable = self.ttl > 0 and self.epoch.listening
        now = self._clock()
        if usable:
            hit = self._entries.get(digest)
            if hit is not None:
                value, seen, deadline = hit
                if seen == self.epoch.read() and now < deadline:
                    return value
        seen = self.epoch.read()  # before the lookup: see the module's docstring
        found = load()
        if found is None:
            self._entries.pop(digest, None)
            return None
        value, expires = found
        if usable:
            with self._lock:
                if len(self._entries) >= _MAX_ENTRIES:
                    self._entries.clear()
                self._entries[digest] = (value, seen, min(now + self.ttl, expires))
        return value


def listen_forever(conninfo: str, epoch: Epoch, stop: threading.Event) -> None:
    """Moves ``epoch`` on at each revocation any master commits, for as long as ``stop`` is not
    set; marks the epoch not listening while its connection is down (see the module's docstring)."""
    while not stop.is_set():
        try:
            with db.connect(conninfo) as conn:
                conn.execute(f"LISTEN {CHANNEL}")
                epoch.bump()  # anything revoked while nobody listened
                epoch.set_listening(True)
                logger.debug("listening for revoked sessions")
                while not stop.is_set():
                    for _ in conn.notifies(timeout=_PROBE_SECONDS):
                        epoch.bump()
                    conn.execute("SELECT 1")
        except psycopg.Error as e:
            logger.warning("revoked-session listener lost its connection (%s); retrying", e)
        finally:
            epoch.set_listening(False)
            epoch.bump()
        stop.wait(1.0)
