"""The master's event loop: waitress's, with readiness asked only of connections that changed.

waitress's loop (``wasyncore.poll2``) builds a new ``poll`` set at every wake-up by asking each
open connection ``readable()`` and ``writable()``: its work per wake-up grows with the open
connections, and a master serving a thousand agents and two thousand trials holds thousands of
them (each agent's heartbeat and changes connections, each trial's preemption long-poll and its
reports) while it wakes thousands of times a second. At 600 agents x 1,200 trials that walk was
30-48% of the master's interpreter time (docs/deploy.md, "Scale").

This loop keeps one ``epoll`` set for the process and asks a connection again only when its
answer may have changed:

- a connection that had an event (its reads and writes happen in the loop: ``received``,
  ``handle_write``, ``handle_close``);
- a connection added to or removed from the map (accepted, handed over, closed);
- a connection whose worker thread changed what ``readable()``/``writable()`` read. For
  waitress's :class:`~waitress.channel.HTTPChannel` that is four attributes (``requests``,
  ``will_close``, ``close_when_flushed``, ``total_outbufs_len``): :class:`TrackedChannel` makes
  each a property whose setter marks the connection (a thread-safe queue) after the value is
  stored, before the thread pulls waitress's trigger; ``requests`` is a list whose ``pop`` (a
  request's end, in place) marks it too;
- every object in the map that is not a :class:`TrackedChannel` (the listener, the trigger,
  the hand-off and relay dispatchers, TLS channels, whose readiness follows their TLS
  session): asked at every wake-up, as waitress does.

Every ``api_full_pass_seconds`` (10 s; the tests' masters 1 s) the loop has asked every object
(a full pass), a tenth of them at a time, as a bound on what an unmarked change could cost, and
counts each tracked connection whose answer changed without a mark (:data:`STATS`, logged as a
warning): 0 is what the tests assert. The pass was whole and once a second until 2026-12-02: at
1,000 agents x 2,000 trials, 3,000-4,000 connections a front, it was 5.6% of the fronts'
samples holding the interpreter (``bench/scale.py --profile``), in one burst a second; sliced
and every 10 s, the fronts' loops used 0.040-0.053 cores against 0.053-0.059 (two alternated
pairs; the fronts' whole CPU moved within its spread).

epoll's event bits are poll's on Linux (``EPOLLIN == POLLIN`` ...), so waitress's
``readwrite`` handles them as it does poll's. A connection that wants nothing is not in the
set at all (as with poll, which then reports no hang-up either).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import select
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, SupportsIndex

from waitress import wasyncore
from waitress.channel import HTTPChannel

logger = logging.getLogger(__name__)

#: Seconds in which a full pass asks every object (master.yaml's ``api_full_pass_seconds``,
#: :attr:`ReadinessMap.full_pass_seconds`), in this many slices, one at a time.
FULL_PASS_SECONDS = 10.0
FULL_PASS_SLICES = 10
_IN = select.POLLIN | select.POLLPRI
_OUT = select.POLLOUT


#: How long a full pass waits for the mark of a change it found unmarked (see _full_pass_slice).
UNMARKED_WAIT_SECONDS = 0.01
UNMARKED_WAITS = 10


@dataclass
class LoopStats:
    """What the loops of this process did (for tests and benches)."""

    wakeups: int = 0
    asked: int = 0
    full_passes: int = 0
    #: Tracked connections whose readiness changed with no mark (should stay 0).
    unmarked: int = 0


STATS = LoopStats()


class ReadinessMap(dict[int, Any]):
    """waitress's socket map (fd -> dispatcher) that records additions and removals, and
    holds the queue of connections marked by their threads."""

    def __init__(self) -> None:
        super().__init__()
        self.changed: collections.deque[int] = collections.deque()
        self.marked: collections.deque[Any] = collections.deque()
        self.loop: ReadinessLoop | None = None
        self.full_pass_seconds = FULL_PASS_SECONDS

    def __setitem__(self, fd: int, obj: Any) -> None:
        super().__setitem__(fd, obj)
        self.changed.append(fd)

    def __delitem__(self, fd: int) -> None:
        super().__delitem__(fd)
        self._removed(fd)

    def pop(self, fd: int, *default: object) -> object:
        obj: object = super().pop(fd, *default)
        self._removed(fd)
        return obj

    def _removed(self, fd: int) -> None:
        # Out of the epoll set now, while the fd is still open: waitress removes a dispatcher
        # from the map before it closes the socket, and a socket handed to another process
        # (dispatch.Handoff) would stay in the set after its close here, reporting the other
        # process's events under an fd number this process may reuse.
        if self.loop is not None:
            self.loop.forget(fd)
        self.changed.append(fd)


def _mark(channel: Any) -> None:
    m = channel.__dict__.get("_map")
    if isinstance(m, ReadinessMap):
        m.marked.append(channel)


class _Requests(list[object]):
    """A channel's ``requests``: a request's end pops it in place (in its worker thread, before
    waitress pulls the trigger), which marks the channel."""

    def __init__(self, items: Iterable[object], channel: object) -> None:
        super().__init__(items)
        self.channel = channel

    def pop(self, index: SupportsIndex = -1) -> object:
        item = super().pop(index)
        _mark(self.channel)
        return item


def _marking(name: str) -> property:
    """A property over ``name`` whose setter marks the connection once the value is stored."""
    slot = "_tracked_" + name
    default = getattr(HTTPChannel, name, None)

    def get(self: object) -> object:
        return self.__dict__.get(slot, default)

    def put(self: object, value: object) -> None:
        if name == "requests" and isinstance(value, list):
            value = _Requests(value, self)
        self.__dict__[slot] = value
        _mark(self)

    return property(get, put)


class TrackedChannel:
    """Put before :class:`~waitress.channel.HTTPChannel` in a channel's bases: the loop asks
    it ``readable()``/``writable()`` only when it had an event or was marked. A subclass that
    overrides either must not be tracked (:func:`tracked` checks)."""

    requests = _marking("requests")
    will_close = _marking("will_close")
    close_when_flushed = _marking("close_when_flushed")
    total_outbufs_len = _marking("total_outbufs_len")


def tracked(obj: Any) -> bool:
    """Whether the loop may skip asking ``obj`` until it has an event or a mark: a
    :class:`TrackedChannel` whose ``readable``/``writable`` are HTTPChannel's."""
    cls = type(obj)
    return (
        isinstance(obj, TrackedChannel)
        and cls.readable is HTTPChannel.readable
        and cls.writable is HTTPChannel.writable
    )


class ReadinessLoop:
    """One process's loop over a :class:`ReadinessMap`."""

    def __init__(self, map: ReadinessMap) -> None:
        self.map = map
        map.loop = self
        self.epoll = select.epoll()
        # fd -> (the object registered, its mask): an fd number is reused once closed.
        self.registered: dict[int, tuple[Any, int]] = {}
        # The objects asked at every wake-up (not tracked), by fd.
        self.always: dict[int, Any] = {}
        self.evented: list[Any] = []
        self.next_slice = 0.0
        # The fds the full pass under way has yet to ask, and how many it asks at a time.
        self.unasked: list[int] = []
        self.slice = 0

    def _mask(self, obj: Any) -> int:
        mask = 0
        if obj.readable():
            mask |= _IN
        if obj.writable() and not obj.accepting:
            mask |= _OUT
        return mask

    def _apply(self, fd: int, obj: Any, mask: int) -> None:
        old = self.registered.get(fd)
        if old is not None and old[0] is obj and old[1] == mask:
            return
        if old is not None:
            # The same fd, another object or another mask. A closed socket left the set on
            # its own (ENOENT/EBADF): nothing to take out.
            with contextlib.suppress(OSError):
                self.epoll.unregister(fd)
            del self.registered[fd]
        if mask:
            try:
                self.epoll.register(fd, mask)
            except FileExistsError:
                self.epoll.modify(fd, mask)
            self.registered[fd] = (obj, mask)

    def forget(self, fd: int) -> None:
        if fd in self.registered:
            with contextlib.suppress(OSError):
                self.epoll.unregister(fd)
            del self.registered[fd]
        self.always.pop(fd, None)

    def _ask(self, fd: int, obj: Any) -> None:
        STATS.asked += 1
        self._apply(fd, obj, self._mask(obj))

    def _changes(self) -> dict[int, Any]:
        """The objects to ask this wake-up (by fd), the map's changes applied."""
        m = self.map
        ask: dict[int, Any] = {}
        while m.changed:
            fd = m.changed.popleft()
            obj = m.get(fd)
            if obj is None:
                self.forget(fd)
                continue
            if tracked(obj):
                self.always.pop(fd, None)
            else:
                self.always[fd] = obj
            ask[fd] = obj
        while m.marked:
            self._still_in(m.marked.popleft(), ask)
        for obj in self.evented:
            self._still_in(obj, ask)
        self.evented = []
        ask.update(self.always)
        return ask

    def _still_in(self, obj: Any, ask: dict[int, Any]) -> None:
        """Adds ``obj`` to ``ask`` if it is still in the map (a closed one has no fd)."""
        at: int | None = getattr(obj, "_fileno", None)
        if at is not None and self.map.get(at) is obj:
            ask[at] = obj

    def _full_pass_slice(self, asked: dict[int, Any]) -> None:
        """Asks the next slice of the full pass under way (a new pass takes the map's fds as
        they are; an object added since is asked as it is added); counts the tracked ones whose
        answer moved unmarked."""
        if not self.unasked:
            self.unasked = list(self.map)
            self.slice = -(-len(self.unasked) // FULL_PASS_SLICES)
        part = self.unasked[-self.slice :]
        del self.unasked[-self.slice :]
        if not self.unasked:
            STATS.full_passes += 1
        moved: list[Any] = []
        for fd in part:
            obj = self.map.get(fd)
            if obj is None or fd in asked:
                continue
            mask = self._mask(obj)
            old = self.registered.get(fd)
            if (old[1] if old is not None and old[0] is obj else 0) != mask:
                moved.append(obj)
            STATS.asked += 1
            self._apply(fd, obj, mask)
        # A change is marked just after it is stored: what is queued now was marked. Worker
        # threads append marks while this runs: they are taken one by one (iterating the deque
        # would fail on its mutation) and asked at the next wake-up, as their trigger asks.
        marked = self.map.marked
        taken = []
        while marked:
            taken.append(marked.popleft())
        # A worker marks just after it stores: its mark may be on the way. Moments with the
        # interpreter let go (only when a change is found unmarked: rare) until it comes, up to
        # UNMARKED_WAITS of them (on a loaded machine one was not always enough).
        for _ in range(UNMARKED_WAITS):
            if not {id(o) for o in moved} - {id(t) for t in taken}:
                break
            time.sleep(UNMARKED_WAIT_SECONDS)
            while marked:
                taken.append(marked.popleft())
        self.evented.extend(taken)
        pending = {id(o) for o in taken}
        for obj in moved:
            if id(obj) not in pending:
                STATS.unmarked += 1
                logger.warning("event loop: %s's readiness changed unmarked", type(obj).__name__)

    def poll(self, timeout: float) -> None:
        STATS.wakeups += 1
        ask = self._changes()
        for fd, obj in ask.items():
            self._ask(fd, obj)
        now = time.monotonic()
        if now >= self.next_slice:
            self.next_slice = now + self.map.full_pass_seconds / FULL_PASS_SLICES
            self._full_pass_slice(ask)
        # Awake for the next slice however quiet the connections.
        timeout = min(timeout, max(0.0, self.next_slice - now))
        if not self.registered:
            # Nothing to wait on (poll would return at once too): wait out the timeout.
            time.sleep(timeout)
            return
        try:
            events = self.epoll.poll(timeout)
        except InterruptedError:
            return
        m = self.map
        for fd, flags in events:
            obj = m.get(fd)
            if obj is None:
                continue
            wasyncore.readwrite(obj, flags)
            self.evented.append(obj)

    def run(self, timeout: float) -> None:
        try:
            while self.map:
                self.poll(timeout)
        finally:
            self.epoll.close()


def loop(map: ReadinessMap, timeout: float) -> None:
    """waitress's ``wasyncore.loop`` over ``map`` (until it is empty)."""
    ReadinessLoop(map).run(timeout)


class ReadinessServer:
    """Put before a waitress server class in its bases (and give the server a
    :class:`ReadinessMap` as its ``map``): its ``run`` is this module's loop."""

    _map: ReadinessMap
    adj: Any
    task_dispatcher: Any

    def run(self) -> None:
        try:
            loop(self._map, self.adj.asyncore_loop_timeout)
        except (SystemExit, KeyboardInterrupt):
            self.task_dispatcher.shutdown()
