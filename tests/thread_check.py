"""No thread outlives the test, or the fixture, that started it (a pytest plugin: tests/conftest.py
loads it for every test).

After each test's teardown, a thread still running that is either not a daemon or has one of
``CHECKED_PREFIXES`` in its name (the tests' own fakes: ``sim-`` for tests/fakes/sim_agent.py)
fails that teardown, naming the thread, unless a fixture of a wider scope that is still set up
owns it. A fixture of module, class, package or session scope owns the threads that appear
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
import time
import weakref
from collections.abc import Generator, Iterable
from typing import Any

import pytest

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


class _Ledger:
    def __init__(self) -> None:
        self.baseline = set(threading.enumerate())
        #: Threads owned by each fixture (of a wider scope than a function) that is set up.
        self.owned: dict[Any, set[threading.Thread]] = {}
        #: Threads of fixtures finalized since the last check, with the fixture's name.
        self.released: dict[threading.Thread, str] = {}
        self.reported: set[threading.Thread] = set()

    def _lineage(self, t: threading.Thread) -> Iterable[threading.Thread]:
        seen: set[threading.Thread] = set()
        cur: threading.Thread | None = t
        while cur is not None and cur not in seen:
            seen.add(cur)
            yield cur
            cur = _PARENT.get(cur)

    def owned_now(self, t: threading.Thread) -> bool:
        mine = set().union(*self.owned.values()) if self.owned else set()
        return any(a in mine for a in self._lineage(t))

    def started_by(self, t: threading.Thread) -> str:
        for a in self._lineage(t):
            if a in self.released:
                return self.released[a]
        return "the test"

    def leftovers(self) -> list[threading.Thread]:
        return [
            t
            for t in threading.enumerate()
            if t not in self.baseline
            and t not in self.reported
            and t is not threading.current_thread()
            and (not t.daemon or t.name.startswith(CHECKED_PREFIXES))
            and not t.name.startswith(IGNORED_PREFIXES)
            and not self.owned_now(t)
        ]


_LEDGER = pytest.StashKey[_Ledger]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_LEDGER] = _Ledger()
    threading.Thread.start = _start  # type: ignore[method-assign]


def pytest_unconfigure(config: pytest.Config) -> None:
    threading.Thread.start = _original_start  # type: ignore[method-assign]


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: Any, request: pytest.FixtureRequest
) -> Generator[None, Any, Any]:
    before = set(threading.enumerate())
    try:
        return (yield)
    finally:
        if fixturedef.scope != "function":
            new = set(threading.enumerate()) - before
            ledger = request.config.stash[_LEDGER]
            ledger.owned.setdefault(fixturedef, set()).update(new)


def pytest_fixture_post_finalizer(fixturedef: Any, request: pytest.FixtureRequest) -> None:
    ledger = request.config.stash[_LEDGER]
    for t in ledger.owned.pop(fixturedef, ()):
        ledger.released[t] = f"fixture {fixturedef.argname!r} ({fixturedef.scope} scope)"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, Any, Any]:
    result = yield
    ledger = item.config.stash[_LEDGER]
    deadline = time.monotonic() + GRACE_SECONDS
    left = ledger.leftovers()
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = ledger.leftovers()
    if left:
        ledger.reported.update(left)
        names = "; ".join(
            f"{t.name!r} ({'daemon' if t.daemon else 'not a daemon'}, started by "
            f"{ledger.started_by(t)})"
            for t in left
        )
        ledger.released.clear()
        pytest.fail(
            f"thread(s) still running after the teardown: {names}: stop and join them in the "
            "test or in the finalizer of the fixture that started them (tests/thread_check.py)",
            pytrace=False,
        )
    ledger.released.clear()
    return result
