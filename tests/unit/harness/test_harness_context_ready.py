"""The wrapper's wait for a context copied in after the container's start (issue 29)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from det.common import context_ready


def test_marker_path_is_named_after_the_container_and_cannot_leave_its_directory() -> None:
    assert context_ready.marker_path("0f1e-2d") == "/run/det/context-0f1e-2d.ready"
    assert context_ready.marker_path("../../etc/x") == "/run/det/context-etcx.ready"


def test_wait_seconds_takes_a_positive_number_else_the_default() -> None:
    assert context_ready.wait_seconds({"DET_CONTEXT_WAIT_SECONDS": "2.5"}) == 2.5
    for bad in ({}, {"DET_CONTEXT_WAIT_SECONDS": "x"}, {"DET_CONTEXT_WAIT_SECONDS": "-1"}):
        assert context_ready.wait_seconds(bad) == context_ready.DEFAULT_WAIT_SECONDS


def test_wait_for_returns_once_the_marker_exists_and_gives_up_at_the_deadline() -> None:
    now = [0.0]
    seen = {"calls": 0}

    def exists(_path: str) -> bool:
        seen["calls"] += 1
        return seen["calls"] > 3

    def sleep(s: float) -> None:
        now[0] += s

    assert context_ready.wait_for("/m", 10, exists, lambda: now[0], sleep) is None
    assert seen["calls"] == 4
    now[0] = 0.0
    problem = context_ready.wait_for("/m", 1, lambda _p: False, lambda: now[0], sleep)
    assert problem is not None and "within 1 s" in problem and "/m" in problem
    assert "\n" not in problem and now[0] >= 1


def _run(tmp: Path, marker: Path, entry: str, wait: str = "60") -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "DET_WORKDIR": str(tmp),
        "DET_CONTEXT_READY": str(marker),
        "DET_CONTEXT_WAIT_SECONDS": wait,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "det.exec.run", "--", entry],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_entrypoint_runs_only_after_the_marker_appears(tmp_path: Path) -> None:
    marker = tmp_path / "ready"
    proc = _run(tmp_path, marker, "cat ctx.txt")
    time.sleep(0.5)  # the wrapper is waiting (not asserted on time: only on what it sees)
    (tmp_path / "ctx.txt").write_text("in place\n")
    marker.touch()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == "in place\n"


def test_a_marker_that_never_comes_fails_the_task_without_running_it(tmp_path: Path) -> None:
    proc = _run(tmp_path, tmp_path / "never", "touch ran", wait="0.3")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "det.exec.run: the task's context did not arrive within 0.3 s" in err
    assert not (tmp_path / "ran").exists()


def test_sigterm_during_the_wait_ends_it_without_running_the_entrypoint(tmp_path: Path) -> None:
    marker = tmp_path / "ready"
    proc = _run(tmp_path, marker, "touch ran")
    deadline = time.monotonic() + 60
    # The wrapper's handler is in place once it waits; before that Python's default ends it too.
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    assert proc.returncode in (128 + signal.SIGTERM, -signal.SIGTERM)
    marker.touch()
    assert not (tmp_path / "ran").exists()
