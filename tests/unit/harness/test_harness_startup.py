"""The start-up marks bench/launch.py reads, and what a task's first process imports."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from det.common import startup


def marks(stderr: str) -> list[tuple[float, int, str]]:
    return [(when, pid, step) for when, pid, _, step in marks_with_cpu(stderr)]


def marks_with_cpu(stderr: str) -> list[tuple[float, int, float, str]]:
    out = []
    for line in stderr.splitlines():
        if line.startswith(startup.PREFIX + " "):
            when, pid, cpu, step = line.split(" ", 4)[1:]
            out.append((float(when), int(pid), float(cpu), step))
    return out


def test_marks_are_written_only_when_asked(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(startup.ENV, raising=False)
    startup.mark("nothing")
    assert capsys.readouterr().err == ""
    monkeypatch.setenv(startup.ENV, "1")
    before = time.time()
    startup.mark("core.init called")
    [(when, pid, step)] = marks(capsys.readouterr().err)
    assert before <= when <= time.time() and pid == os.getpid() and step == "core.init called"


def test_a_mark_carries_the_cpu_time_the_process_used_so_far(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(startup.ENV, "1")
    startup.mark("before")
    spent = time.process_time()
    while time.process_time() - spent < 0.05:  # CPU work, not a wait: counted whatever the load
        pass
    startup.mark("after")
    (_, _, first, _), (_, _, second, step) = marks_with_cpu(capsys.readouterr().err)
    assert step == "after" and second - first >= 0.049


def test_the_process_start_comes_from_the_kernel() -> None:
    started = startup.process_start_time()
    assert started is not None
    # This test process started before now, and not before the test run did (minutes at most).
    assert time.time() - 3600 < started < time.time()


def test_a_task_marks_each_step_of_both_processes(tmp_path: Path) -> None:
    child = "from det import core; core.init()"
    env = {**os.environ, startup.ENV: "1", "DET_WORKDIR": str(tmp_path)}
    env.pop("DET_MASTER", None)
    proc = subprocess.run(
        [sys.executable, "-m", "det.exec.run", "--", sys.executable, "-c", child],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    found = marks(proc.stderr)
    by_pid: dict[int, list[str]] = {}
    for _, pid, step in found:
        by_pid.setdefault(pid, []).append(step)
    assert len(by_pid) == 2, found
    [wrapper] = [steps for steps in by_pid.values() if "entrypoint started" in steps]
    [entrypoint] = [steps for steps in by_pid.values() if steps is not wrapper]
    assert wrapper == ["process started", "imports done", "entrypoint started"]
    assert entrypoint == [
        "process started",
        "det.core: import started",
        "det.core: imported",
        "core.init called",
    ]


def test_a_tasks_first_process_leaves_the_core_api_unloaded() -> None:
    """``python3 -m det.exec.run`` runs before every entrypoint: it loads neither the Core API
    nor ``requests`` (0.1-0.3 s of a task's start in a task image)."""
    code = (
        "import sys, det, det.exec.run\n"
        "loaded = [m for m in ('det.core', 'requests', 'det.storage') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "from det import core, InvalidHP, ClusterInfo\n"
        "assert core.init and InvalidHP and ClusterInfo and 'requests' in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
