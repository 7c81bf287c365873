"""tests/thread_check.py: a test that leaves a thread running fails; one owned by a wider
fixture that stops it does not. Each case is a pytest run of its own on a small file."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

from tests.leak_ledger import run_checked

REPO = Path(__file__).resolve().parents[2]

TESTS = """
import threading

import pytest

import tests.thread_check

tests.thread_check.GRACE_SECONDS = 0.3  # each leak below waits that long before it is reported
stop = threading.Event()


def test_leaks_a_thread():
    threading.Thread(target=stop.wait, name="plain-worker").start()  # not a daemon


def test_leaks_a_daemon_sim_thread():
    threading.Thread(target=stop.wait, name="sim-leaky", daemon=True).start()


def test_joins_its_thread():
    t = threading.Thread(target=stop.wait, args=(0.1,), name="sim-joined")
    t.start()
    t.join()


def test_an_unnamed_daemon_is_not_checked():
    threading.Thread(target=stop.wait, args=(30,), daemon=True).start()


@pytest.fixture(scope="module")
def agent():
    halt = threading.Event()

    def loop():
        # The module's agent starts a task thread of its own during a test (below).
        tasks = []
        while not halt.wait(0.02):
            if started.is_set() and not tasks:
                tasks.append(threading.Thread(target=halt.wait, name="sim-agent:task"))
                tasks[0].start()
        for t in tasks:
            t.join()

    started = threading.Event()
    t = threading.Thread(target=loop, name="sim-agent", daemon=True)
    t.start()
    yield started
    halt.set()
    t.join()


def test_uses_the_module_agent(agent):
    agent.set()


def test_uses_it_again(agent):
    pass


@pytest.fixture(scope="module")
def careless():
    # Never stopped: its thread is still there when the module's last test ends.
    threading.Thread(target=threading.Event().wait, name="sim-careless", daemon=True).start()
    yield


def test_with_a_careless_fixture(careless):
    pass


def test_last(careless):
    stop.set()
"""


def _run(tmp_path: Path) -> tuple[str, list[str]]:
    (tmp_path / "test_threads.py").write_text(textwrap.dedent(TESTS))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return run_checked("tests.thread_check", tmp_path / "test_threads.py", env)


def test_a_test_that_leaves_a_thread_running_fails_and_one_that_joins_it_passes(
    tmp_path: Path,
) -> None:
    out, failed = _run(tmp_path)
    assert failed == [
        "test_last",  # the careless fixture ends in its teardown
        "test_leaks_a_daemon_sim_thread",
        "test_leaks_a_thread",
    ], out
    assert "'plain-worker' (not a daemon, started by the test)" in out, out
    assert "'sim-leaky' (daemon, started by the test)" in out, out
    assert "'sim-careless' (daemon, started by fixture 'careless' (module scope))" in out, out
    for name in ("test_joins_its_thread", "test_an_unnamed_daemon_is_not_checked",
                 "test_uses_the_module_agent", "test_uses_it_again",
                 "test_with_a_careless_fixture"):  # fmt: skip
        assert f"PASSED test_threads.py::{name}" in out, out
    assert "8 passed, 3 errors" in out, out
