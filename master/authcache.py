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
from psycopg.conninfo import make_conninfo

from det.master import db, leader_lock
from det.master.db.connection import notifications

logger = logging.getLogger(__name__)

CHANNEL = "det_auth"
# How often an idle listening connection is proven alive.
_PROBE_SECONDS = 5.0
_MAX_ENTRIES = 10_000

T = TypeVar("T")


class Epoch:
    """A counter in shared memory, moved by each notification on ``channel``: every process
    forked after it was made sees each move. The sessions' (:data:`CHANNEL`) and the experiment
    list's (:data:`det.master.listcache.CHANNEL`) are two."""

    def __init__(self, channel: str = CHANNEL) -> None:
        self.channel = channel
        self._value = multiprocessing.RawValue("Q", 0)
        self._listening = multiprocessing.RawValue("b", 0)
        self._alone = multiprocessing.RawValue("b", 0)
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

    @property
    def alone(self) -> bool:
        """Whether this master's listener last found no other det master on the database
        (:func:`other_masters`); set by :func:`listen_forever` when it is given ``presence``."""
        return bool(self._alone.value)

    def set_alone(self, value: bool) -> None:
        self._alone.value = 1 if value else 0

    def watch(self, conn: psycopg.Connection[Any]) -> None:
        """A pool's ``configure``: the connection listens, and a notification of its own
        transaction (delivered with its commit) moves the epoch on at once."""
        conn.execute(f"LISTEN {self.channel}")
        conn.commit()
        own = conn.info.backend_pid
        channel = self.channel

        def on_notify(n: psycopg.Notify) -> None:
            # Others' notifications wait here until this connection is next used: the
            # listening thread has already acted on them.
            if n.channel == channel and n.pid == own:
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


#: How often the listener looks for other masters when it tracks presence (``presence``).
PRESENCE_SECONDS = 1.0
#: Each of a master's connections carries the application name ``"det-master <id>"`` (its
#: listener's ``"det-master <id> listener"``): how masters on one database see each other in
#: ``pg_stat_activity`` (:func:`application_name`).
APPLICATION_PREFIX = "det-master "
_LISTENER = " listener"
#: Where a master says it has seen another one (the payload: the other's id, then its own).
PRESENCE_CHANNEL = "det_presence"


def application_name(master_id: str, *, listener: bool = False) -> str:
    return APPLICATION_PREFIX + master_id + (_LISTENER if listener else "")


def other_masters(conn: psycopg.Connection[Any], own: str, *, listening: bool = False) -> set[str]:
    """The ids of the other det masters connected to this database (with ``listening``: those
    whose listener is connected, the only ones that may check the list in memory)."""
    return set(
        db.column(
            conn,
            str,
            "SELECT DISTINCT split_part(application_name, ' ', 2) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name LIKE %s"
            " AND application_name NOT LIKE %s AND split_part(application_name, ' ', 2) <> %s",
            (
                APPLICATION_PREFIX + "%" + (_LISTENER if listening else ""),
                "%" + leader_lock.APPLICATION_SUFFIX,
                own,
            ),
        )
    )


def listen_forever(
    conninfo: str,
    epochs: list[Epoch],
    stop: threading.Event,
    *,
    presence: tuple[Epoch, str] | None = None,
) -> None:
    """Moves each epoch on at each notification on its channel any master commits, for as long
    as ``stop`` is not set; marks them not listening while the connection is down (see the
    module's docstring). With ``presence`` (an epoch and this master's id), it also looks for
    other masters every :data:`PRESENCE_SECONDS`, keeps that epoch's :attr:`Epoch.alone`
    (moving it on when the master finds itself alone again) and says on
    :data:`PRESENCE_CHANNEL` which masters it has seen: a starting master waits for that
    (:func:`wait_until_seen`)."""
    by_channel = {e.channel: e for e in epochs}
    probe = _PROBE_SECONDS
    if presence is not None:
        probe = PRESENCE_SECONDS
        conninfo = make_conninfo(
            conninfo, application_name=application_name(presence[1], listener=True)
        )
    while not stop.is_set():
        try:
            with db.connect(conninfo) as conn:
                for e in epochs:
                    conn.execute(f"LISTEN {e.channel}")
                for e in epochs:
                    e.bump()  # anything changed while nobody listened
                    e.set_listening(True)
                logger.debug("listening on %s", ", ".join(by_channel))
                while not stop.is_set():
                    # The first look right after LISTEN: a master alone is alone from its
                    # listener's first round trip, not a probe period after it (a page kept in
                    # between would be re-read once, when the epoch moves on becoming alone).
                    if presence is None:
                        conn.execute("SELECT 1")
                    else:
                        _look_for_others(conn, *presence)
                    for n in notifications(conn, probe):
                        heard = by_channel.get(n.channel)
                        if heard is not None:
                            heard.bump()
        except psycopg.Error as err:
            logger.warning("the database listener lost its connection (%s); retrying", err)
        finally:
            if presence is not None:
                presence[0].set_alone(False)
            for e in epochs:
                e.set_listening(False)
                e.bump()
        stop.wait(1.0)


def _look_for_others(conn: psycopg.Connection[Any], epoch: Epoch, own: str) -> None:
    others = other_masters(conn, own)
    alone = not others
    if alone != epoch.alone:
        if alone:
            epoch.bump()  # pages kept before another master came are not trusted again
            logger.info(
                "alone on the database: the experiment list's kept pages are checked in memory"
            )
        else:
            logger.info(
                "other det masters on the database (%s): the experiment list's kept pages are"
                " checked against the database",
                ", ".join(sorted(others)),
            )
        epoch.set_alone(alone)
    # Only now (the flag set): a master that starts waits for this before it serves. Said at
    # each look, for every master seen.
    for other in others:
        conn.execute("SELECT pg_notify(%s, %s)", (PRESENCE_CHANNEL, f"{other} {own}"))


def wait_until_seen(conninfo: str, own: str, timeout: float) -> set[str]:
    """Before a master serves: waits until every other master whose listener is connected has
    said it saw this one (it then checks the experiment list against the database, no longer in
    memory), at most ``timeout`` seconds. Answers the ids of those that did not in time."""
    with db.connect(make_conninfo(conninfo, application_name=application_name(own))) as conn:
        conn.execute(f"LISTEN {PRESENCE_CHANNEL}")
        waiting = other_masters(conn, own, listening=True)
        deadline = time.monotonic() + timeout
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for n in notifications(conn, min(left, PRESENCE_SECONDS)):
                seen, _, by = n.payload.partition(" ")
                if seen == own:
                    waiting.discard(by)
            # A master whose listener went away meanwhile says nothing: no longer waited for.
            waiting &= other_masters(conn, own, listening=True)
        return waiting
