"""Locks for what a master process holds by the thousand, each two objects for the garbage
collector rather than nine or ten.

A front at 1,000 agents x 2,000 trials holds 3,000-4,000 connections and parks 1,000-2,000
long-polls (``bench/scale.py --heap``): its old generation, which every full collection scans
with the process stopped, was 147,000-164,000 objects. Each connection's output lock
(waitress's ``threading.Condition()``: the condition, its ``__dict__``, an ``RLock``, a deque
of waiters and five bound methods) was nine of an idle connection's fifteen, and each
long-poll's ``threading.Event`` (an event, a condition, their dicts, a lock, a deque, bound
methods) ten more. :class:`OutputLock` and :class:`Wakeup` keep the same behaviour in a
``__slots__`` object and one lock each (a waiters' deque only while someone waits).
"""

from __future__ import annotations

import _thread
import collections
import contextlib
import threading
from typing import Any


class OutputLock:
    """``threading.Condition()`` (over a re-entrant lock) as waitress's channels use it for
    their output: ``with``, ``acquire``/``release``, ``wait`` and ``notify``."""

    __slots__ = ("_lock", "_waiters")

    def __init__(self) -> None:
        self._lock: Any = threading.RLock()
        self._waiters: collections.deque[Any] | None = None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return bool(self._lock.acquire(blocking, timeout))

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return bool(self._lock.acquire())

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def wait(self, timeout: float | None = None) -> bool:
        """Releases the lock (however deep its holder went in), waits for a :meth:`notify` or
        ``timeout`` seconds, and takes it back as deep as it was."""
        if not self._lock._is_owned():
            raise RuntimeError("cannot wait on an output lock not held")
        waiter = _thread.allocate_lock()
        waiter.acquire()
        if self._waiters is None:
            self._waiters = collections.deque()
        self._waiters.append(waiter)
        saved = self._lock._release_save()
        notified = False
        try:
            if timeout is None:
                notified = waiter.acquire()
            elif timeout > 0:
                notified = waiter.acquire(True, timeout)
            else:
                notified = waiter.acquire(False)
            return notified
        finally:
            self._lock._acquire_restore(saved)
            if not notified:
                # (Gone already if notified between the timeout and the lock taken back.)
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)

    def notify(self, n: int = 1) -> None:
        if not self._lock._is_owned():
            raise RuntimeError("cannot notify on an output lock not held")
        waiters = self._waiters
        while waiters and n > 0:
            waiters.popleft().release()
            n -= 1

    def notify_all(self) -> None:
        self.notify(len(self._waiters or ()))


def slim_output_lock(channel: type) -> type:
    """``channel`` (a waitress ``HTTPChannel`` class) with an :class:`OutputLock` for its
    output."""

    class Slim(channel):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.outbuf_lock = OutputLock()

    Slim.__name__ = Slim.__qualname__ = channel.__name__
    return Slim


class Wakeup:
    """``threading.Event`` for one waiting thread and the threads that wake it: ``set``,
    ``clear``, ``is_set`` and ``wait``. Its lock is held while it is not set."""

    __slots__ = ("_gate",)

    def __init__(self) -> None:
        self._gate = _thread.allocate_lock()
        self._gate.acquire()

    def set(self) -> None:
        with contextlib.suppress(RuntimeError):  # set already
            self._gate.release()

    def clear(self) -> None:
        self._gate.acquire(False)

    def is_set(self) -> bool:
        return not self._gate.locked()

    def wait(self, timeout: float | None = None) -> bool:
        """True once set (at once if it is), False after ``timeout`` seconds unset."""
        if timeout is None:
            taken = self._gate.acquire()
        elif timeout > 0:
            taken = self._gate.acquire(True, timeout)
        else:
            taken = self._gate.acquire(False)
        if not taken:
            return False
        # Set it again for whoever looks next (a set() meanwhile did already).
        self.set()
        return True
