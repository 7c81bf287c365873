"""A clock for the tests' timeouts that does not count the time the machine stood still.

The machines that run the suite are virtual, and their host may pause one for minutes (to
snapshot it: the kernel then logs "crng reseeded due to virtual machine fork"). Every clock in
the guest, ``CLOCK_MONOTONIC`` included, jumps by the pause when the machine resumes, so every
timeout running at that moment expires at once: a CI run paused for 206 s failed three tests
whose masters had been told to stop 1 s before the pause and were still on their way out.

:func:`now` is ``time.monotonic()`` less the time this process could not run. A daemon thread
wakes every :data:`TICK` seconds; when it wakes more than :data:`STALL` seconds after its last
tick, the excess is counted as frozen (a thread that only sleeps is not that late on a loaded
machine: the suite's worst scheduling delays are tens of milliseconds). A timeout measured on
this clock is at least as long as one on ``time.monotonic()``, never shorter, and still expires
when what it waits for hangs: the ticks go on. Product code never uses it: a master on a paused
machine does see its agents late, as it should.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from typing import Protocol

TICK = 0.25
STALL = 5.0

_lock = threading.Lock()
_frozen = 0.0
_last = time.monotonic()
_pid: int | None = None


def _tick() -> None:
    global _frozen, _last
    while True:
        time.sleep(TICK)
        t = time.monotonic()
        with _lock:
            _frozen += max(0.0, t - _last - STALL)
            _last = t


def _running() -> None:
    """One ticker per process (a fork has none until it asks)."""
    global _pid, _last
    if _pid == os.getpid():
        return
    with _lock:
        if _pid == os.getpid():
            return
        _pid = os.getpid()
        _last = time.monotonic()
        threading.Thread(target=_tick, name="test-stall-clock", daemon=True).start()


def now() -> float:
    """Seconds, as ``time.monotonic()``, without the stalls seen so far (and the one that may be
    going on: the ticker is the last thread to run again after a pause)."""
    _running()
    t = time.monotonic()
    with _lock:
        return t - _frozen - max(0.0, t - _last - STALL)


def frozen_seconds() -> float:
    """The stalls counted so far in this process."""
    _running()
    with _lock:
        return _frozen


class Stopwatch:
    """How much of the time since it was made the machine stood still."""

    def __init__(self) -> None:
        self._mono, self._clock = time.monotonic(), now()

    def stalled(self) -> float:
        return max(0.0, (time.monotonic() - self._mono) - (now() - self._clock))


class _Waitable(Protocol):
    def wait(self, timeout: float | None = None) -> int: ...


def wait_process(proc: _Waitable, timeout: float) -> int:
    """``proc.wait(timeout)`` with ``timeout`` on this clock: raises
    ``subprocess.TimeoutExpired`` as the process's own ``wait`` does."""
    deadline = now() + timeout
    while True:
        try:
            return proc.wait(timeout=min(1.0, max(0.05, deadline - now())))
        except subprocess.TimeoutExpired:
            if now() >= deadline:
                raise
