"""No test writes the host's fixed paths (a pytest plugin: tests/conftest.py loads it).

A few paths are where code made for containers writes when it runs on the host by mistake:
``/run/determined`` (det.exec.run writes the official task info files there unless
``DET_INFO_DIR`` says otherwise; every official client on the machine then believes it runs on a
cluster and fails off-cluster tests at random) and ``/determined_shared_fs`` (the official
package's default shared_fs mount). After each test's teardown, one of them that did not exist
when the session started fails that teardown, naming it, and is removed so that it fails one
test, not every test after it. With parallel workers the test named may be a neighbour of the
one that wrote it: the path is what matters.
"""

from __future__ import annotations

import shutil
from collections.abc import Generator
from pathlib import Path

import pytest

WATCHED = (Path("/run/determined"), Path("/determined_shared_fs"))
_present_at_start: set[Path] = set()


def pytest_sessionstart(session: pytest.Session) -> None:
    _present_at_start.update(p for p in WATCHED if p.exists())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    yield
    appeared = [p for p in WATCHED if p not in _present_at_start and p.exists()]
    for p in appeared:
        shutil.rmtree(p, ignore_errors=True)
    if appeared:
        raise AssertionError(
            f"{item.nodeid} (or a test of a parallel worker) wrote the host's "
            f"{', '.join(map(str, appeared))}: a test writes only its own temporary directories"
            " (set DET_INFO_DIR for det.exec.run); removed"
        )
