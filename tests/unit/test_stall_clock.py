"""tests/stall_clock.py: a timeout measured on it outlasts a pause of the whole process group (as
a paused virtual machine pauses everything), and still expires when what it waits for hangs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests import stall_clock

REPO = Path(__file__).resolve().parents[2]

# The waiter starts a worker that needs 1 s of CPU (a sleep would not do: its end is on the
# monotonic clock, which the pause moves on), and waits for it 4 s.
WAITER = textwrap.dedent(
    """
    import subprocess, sys, time
    from tests import stall_clock
    WORK = "import time\\nwhile time.process_time() < 1.0: pass"
    stall_clock.STALL = 0.5
    clock = stall_clock.now if sys.argv[1] == "stall_clock" else time.monotonic
    worker = subprocess.Popen([sys.executable, "-c", WORK])
    deadline = clock() + 4.0  # before the pause can come
    watch = stall_clock.Stopwatch()
    print("started", flush=True)
    while worker.poll() is None and clock() < deadline:
        time.sleep(0.05)
    print("exited" if worker.poll() is not None else "timed out", flush=True)
    worker.kill()
    print(round(stall_clock.frozen_seconds(), 1), round(watch.stalled(), 1), flush=True)
    """
)


def _paused_run(clock: str) -> tuple[list[str], float]:
    """Runs WAITER in its own process group and stops the whole group for 5 s as soon as the
    worker is started: what it printed, and how long the pause lasted."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WAITER, clock],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "started"
        os.killpg(proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        time.sleep(5)
        os.killpg(proc.pid, signal.SIGCONT)
        paused = time.monotonic() - stopped
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return out.split(), paused


def test_a_wait_outlasts_a_pause_of_the_machine_that_a_monotonic_wait_does_not() -> None:
    (*result, frozen, stalled), paused = _paused_run("stall_clock")
    assert result == ["exited"]
    assert paused - 0.5 - 1.0 <= float(frozen) <= paused  # the pause less STALL, give or take
    assert float(stalled) == float(frozen)  # what a Stopwatch started before the pause saw
    (*result, _, _), _ = _paused_run("monotonic")
    assert result == ["timed", "out"]


def test_a_wait_for_a_hung_process_still_times_out() -> None:
    hung = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):
            stall_clock.wait_process(hung, 1.0)
        assert time.monotonic() - started < 1.0 + stall_clock.STALL
    finally:
        hung.kill()
        hung.wait()


def test_the_clock_runs_with_time_when_nothing_stalls() -> None:
    a, m = stall_clock.now(), time.monotonic()
    time.sleep(0.5)
    assert stall_clock.now() - a == pytest.approx(time.monotonic() - m, abs=0.05)


def test_a_stopwatch_sees_no_stall_in_plain_time() -> None:
    # (one that sees the pause: the paused run above)
    watch = stall_clock.Stopwatch()
    time.sleep(0.3)
    assert watch.stalled() == 0.0
