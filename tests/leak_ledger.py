"""What tests/thread_check.py and tests/tmp_check.py share: a pytest plugin object that keeps a
ledger of what exists (threads, temporary entries), which fixture of a wider scope owns what, and
fails the teardown of a test after which something is left that nobody owns.

A fixture of module, class, package or session scope owns what appears while it is set up; when
it is finalized, what it owned must be gone too, and a leftover fails the teardown in which the
fixture ended, naming the fixture. A leftover is given the check's grace period to go (what was
told to stop may still be on its way out), then reported once, so that it fails one test, not
every test after it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Generator, Hashable
from pathlib import Path
from typing import Any, Generic, TypeVar

import pytest

T = TypeVar("T", bound=Hashable)


class Ledger(Generic[T]):
    """Register an instance as a plugin (``config.pluginmanager.register``); a subclass says what
    exists now, which of it is a leftover, and how the failure reads."""

    def __init__(self) -> None:
        #: What each fixture (of a wider scope than a function) that is set up owns.
        self.owned: dict[Any, set[T]] = {}
        #: What fixtures finalized since the last check owned, with the fixture's name.
        self.released: dict[T, str] = {}

    # What a check defines.
    def current(self) -> set[T]:
        raise NotImplementedError

    def leftovers(self) -> list[T]:
        """What exists now that neither the baseline nor a fixture still set up owns and that
        was not reported before."""
        raise NotImplementedError

    def grace_seconds(self) -> float:
        raise NotImplementedError

    def failure(self, left: list[T], released: dict[T, str]) -> str:
        """The teardown's failure (``released``: what fixtures just finalized owned); marks
        ``left`` as reported."""
        raise NotImplementedError

    # Shared.
    def owned_now(self) -> set[T]:
        return set().union(*self.owned.values()) if self.owned else set()

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(
        self, fixturedef: Any, request: pytest.FixtureRequest
    ) -> Generator[None, Any, Any]:
        before = self.current()
        try:
            return (yield)
        finally:
            if fixturedef.scope != "function":
                self.owned.setdefault(fixturedef, set()).update(self.current() - before)

    def pytest_fixture_post_finalizer(
        self, fixturedef: Any, request: pytest.FixtureRequest
    ) -> None:
        for thing in self.owned.pop(fixturedef, ()):
            self.released[thing] = f"fixture {fixturedef.argname!r} ({fixturedef.scope} scope)"

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, Any, Any]:
        result = yield
        deadline = time.monotonic() + self.grace_seconds()
        left = self.leftovers()
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = self.leftovers()
        released, self.released = self.released, {}
        if left:
            pytest.fail(self.failure(left, released), pytrace=False)
        return result


def run_checked(plugin: str, test_file: Path, env: dict[str, str]) -> tuple[str, list[str]]:
    """Runs pytest with ``plugin`` alone on ``test_file`` (in its folder): its output, and the
    tests whose teardown the check failed (the checks' own unit tests)."""
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", plugin, "-p", "no:cacheprovider", "-p", "no:xdist",
         "-rA", test_file.name],
        cwd=test_file.parent, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = r.stdout + r.stderr
    mark = f"ERROR {test_file.name}::"
    failed = sorted(ln[len(mark) :].split()[0] for ln in out.splitlines() if ln.startswith(mark))
    return out, failed
