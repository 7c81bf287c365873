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

# The waiter starts a worker that needs half a second of CPU (a sleep would not do: its end is
# on the monotonic clock, which the pause moves on) and waits for it 6 s on the stall clock;
# the pause lasts 8 s, so a deadline on the monotonic clock would have passed at its end.
WAITER = textwrap.dedent(
    """
    import subprocess, sys, time
    from tests import stall_clock
    WORK = "import time\\nwhile time.process_time() < 0.5: pass"
    stall_clock.STALL = 0.5
    worker = subprocess.Popen([sys.executable, "-c", WORK])
    began = time.monotonic()
    deadline = stall_clock.now() + 6.0  # before the pause can come
    watch = stall_clock.Stopwatch()
    print("started", flush=True)
    while worker.poll() is None and stall_clock.now() < deadline:
        time.sleep(0.05)
    waited = time.monotonic() - began
    print("exited" if worker.poll() is not None else "timed-out", flush=True)
    worker.kill()
    print(waited, stall_clock.frozen_seconds(), watch.stalled(), flush=True)
    """
)
PAUSE = 8.0


def test_a_wait_outlasts_a_pause_of_the_machine() -> None:
    """The waiter in its own process group, the whole group stopped as soon as the worker
    is started."""
    with subprocess.Popen(  # closes the pipe however the test ends
        [sys.executable, "-c", WAITER],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "started"
            os.killpg(proc.pid, signal.SIGSTOP)
            stopped = time.monotonic()
            time.sleep(PAUSE)
            os.killpg(proc.pid, signal.SIGCONT)
            paused = time.monotonic() - stopped
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    result, *figures = out.split()
    waited, frozen, stalled = map(float, figures)
    assert result == "exited"
    assert waited > 6.0  # a deadline on time.monotonic() would have passed
    assert frozen >= paused - 0.5 - 1.0  # the pause less STALL, give or take a tick
    assert stalled == pytest.approx(frozen, abs=0.01)  # a Stopwatch started before the pause


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
    # (one that sees the pause: test_a_wait_outlasts_a_pause_of_the_machine)
    watch = stall_clock.Stopwatch()
    time.sleep(0.3)
    assert watch.stalled() == 0.0
