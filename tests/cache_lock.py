"""An exclusive lock on a cache directory of the tests (a wheelhouse) while it is checked and
filled: ``.ci/run`` fills the wheelhouses in the background while the tests that read them may
already be running, and two xdist workers may want the same one."""

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
