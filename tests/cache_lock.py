"""An exclusive lock on a cache directory of the tests (a wheelhouse) while it is checked and
filled: ``.ci/run`` fills the wheelhouses in the background while the tests that read them may
already be running, and two xdist workers may want the same one.

:func:`try_cache_lock` does not wait: it yields whether the lock was taken, for a user that has
another way when the cache is busy (the machines' engine volumes, ``tests/e2e/machines.py``)."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def cache_lock(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w", encoding="ascii") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
        yield


@contextlib.contextmanager
def try_cache_lock(directory: Path) -> Iterator[bool]:
    """The same lock, taken only if it is free now: yields True while it is held, False (and
    holds nothing) when another process (or another open of the file) has it."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w", encoding="ascii") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when the file closes
        except BlockingIOError:
            yield False
            return
        yield True
