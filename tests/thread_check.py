"""No thread outlives the test, or the fixture, that started it (a pytest plugin: tests/conftest.py
loads it for every test).

After each test's teardown, a thread still running that is either not a daemon or has one of
``CHECKED_PREFIXES`` in its name (the tests' own fakes: ``sim-`` for tests/fakes/sim_agent.py)
fails that teardown, naming the thread, unless a fixture of a wider scope that is still set up
owns it (tests/leak_ledger.py). A fixture of a wider scope owns the threads that appear
while it is set up, and every thread those threads start later (a module-scoped simulated agent
starts a task thread during a test: the fixture owns it, not the test); when the fixture is
finalized its threads must be gone too, and a leftover one fails the teardown in which the
fixture ended. Threads that ran before the first test (the interpreter's, plugins') are ignored.
A leftover thread is given ``GRACE_SECONDS`` to end (one told to stop may still be on its way
out) and is reported once.

Why: a thread left behind keeps calling into a master or the process environment while the next
tests run, and fails one of them at random (issue 44: a simulated agent's heartbeat thread read
``os.environ`` while pytest changed it).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable

import pytest

from tests.leak_ledger import Ledger

#: Names of threads checked even when they are daemons.
CHECKED_PREFIXES = ("sim-",)
#: Names of threads never checked: the idle workers of an event loop's default executor, which
#: lives as long as the process when the loop is process-wide (Pulumi's runtime keeps one: the
#: deploy tests' mocked renderings).
IGNORED_PREFIXES = ("asyncio_",)
GRACE_SECONDS = 3.0

# Which thread started which (Thread.start is wrapped while the plugin is loaded).
_PARENT: weakref.WeakKeyDictionary[threading.Thread, threading.Thread] = weakref.WeakKeyDictionary()
_original_start = threading.Thread.start


def _start(self: threading.Thread) -> None:
    _PARENT[self] = threading.current_thread()
    _original_start(self)


class _Threads(Ledger[threading.Thread]):
    def __init__(self) -> None:
        super().__init__()
        self.baseline = set(threading.enumerate())
        self.reported: set[threading.Thread] = set()

    def current(self) -> set[threading.Thread]:
        return set(threading.enumerate())

    def grace_seconds(self) -> float:
        return GRACE_SECONDS

    def _lineage(self, t: threading.Thread) -> Iterable[threading.Thread]:
        seen: set[threading.Thread] = set()
        cur: threading.Thread | None = t
        while cur is not None and cur not in seen:
            seen.add(cur)
            yield cur
            cur = _PARENT.get(cur)

    def leftovers(self) -> list[threading.Thread]:
        mine = self.owned_now()
        return [
            t
            for t in threading.enumerate()
            if t not in self.baseline
            and t not in self.reported
            and t is not threading.current_thread()
            and (not t.daemon or t.name.startswith(CHECKED_PREFIXES))
            and not t.name.startswith(IGNORED_PREFIXES)
            and not any(a in mine for a in self._lineage(t))  # its starter's owner owns it
        ]

    def failure(self, left: list[threading.Thread], released: dict[threading.Thread, str]) -> str:
        self.reported.update(left)

        def started_by(t: threading.Thread) -> str:
            return next((released[a] for a in self._lineage(t) if a in released), "the test")

        names = "; ".join(
            f"{t.name!r} ({'daemon' if t.daemon else 'not a daemon'}, started by {started_by(t)})"
            for t in left
        )
        return (
            f"thread(s) still running after the teardown: {names}: stop and join them in the "
            "test or in the finalizer of the fixture that started them (tests/thread_check.py)"
        )


_NAME = "det-thread-check"


def pytest_configure(config: pytest.Config) -> None:
    threading.Thread.start = _start  # type: ignore[method-assign]
    config.pluginmanager.register(_Threads(), _NAME)


def pytest_unconfigure(config: pytest.Config) -> None:
    threading.Thread.start = _original_start  # type: ignore[method-assign]
    plugin = config.pluginmanager.get_plugin(_NAME)
    if plugin is not None:
        config.pluginmanager.unregister(plugin)
