"""A gang's container stops once the master ended its allocation (issue 39): det.exec.run asks
the master, and only a refused token (401) stops the task; silence or errors change nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from det.exec import allocation_watch
from tests.unit.harness.fake_master import FakeMaster

GANG = {"DET_CONTAINER_ADDRS": json.dumps(["10.0.0.2", "10.0.0.3"]), "DET_CONTAINER_RANK": "1"}


@pytest.fixture
def master() -> Iterator[FakeMaster]:
    m = FakeMaster()
    m.start()
    yield m
    m.stop()


def run_wrapped(master: FakeMaster, log: Path, **extra: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    # The official info files go to the test's own directory, never the host's /run/determined
    # (every official client on the machine would then believe it runs on a cluster).
    info_dir = str(log.parent / f"info-{log.stem}")
    env.update(
        master.task_env(**GANG, DET_ALLOCATION_WATCH_SECONDS="0.2", DET_INFO_DIR=info_dir, **extra)
    )
    cmd = [sys.executable, "-m", "det.exec.run", "--", "sleep", "60"]
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, env=env, stderr=out)


def test_a_gang_container_stops_once_its_token_is_refused(
    master: FakeMaster, tmp_path: Path
) -> None:
    """Before: the container ran on (its agent dead, its peers gone) until killed from outside."""
    master.state.fail_status[r"/signals/preemption$"] = 401
    proc = run_wrapped(master, tmp_path / "log")
    try:
        code = proc.wait(timeout=20)
    finally:
        proc.kill()
        proc.wait()
    assert code == 128 + 15, (tmp_path / "log").read_text()  # SIGTERM to the entrypoint's group
    assert "the master ended allocation 3.1.1" in (tmp_path / "log").read_text()


@pytest.mark.parametrize("status", [200, 500, 403, None])
def test_anything_else_leaves_it_running(
    master: FakeMaster, status: int | None, tmp_path: Path
) -> None:
    if status is None:
        master.stop()  # unreachable: the master blinked
    elif status != 200:
        master.state.fail_status[r"/signals/preemption$"] = status
    proc = run_wrapped(master, tmp_path / "log")
    try:
        if status is not None:
            master.wait_for("/signals/preemption", count=3, timeout=20)
        else:
            time.sleep(2)
        assert proc.poll() is None, (tmp_path / "log").read_text()
    finally:
        proc.kill()
        proc.wait()


def test_only_a_gangs_containers_are_watched() -> None:
    base = {"DET_MASTER": "http://m", "DET_ALLOCATION_ID": "a", "DET_SESSION_TOKEN": "t"}
    assert allocation_watch.interval({**base, **GANG}) == allocation_watch.DEFAULT_INTERVAL
    assert allocation_watch.interval({**base, "DET_CONTAINER_ADDRS": '["10.0.0.2"]'}) is None
    assert allocation_watch.interval(base) is None
    assert allocation_watch.interval({**GANG, "DET_MASTER": "http://m"}) is None
    assert allocation_watch.interval({**base, **GANG, "DET_ALLOCATION_WATCH_SECONDS": "0"}) is None


@pytest.mark.parametrize("status", [None, 502])
def test_a_gang_container_stops_once_the_master_is_silent_past_its_fence(
    master: FakeMaster, status: int | None, tmp_path: Path
) -> None:
    """A machine cut off whose agent is dead too: nothing else stops its ranks. Before: they ran
    on for as long as the master could not be reached."""
    if status is None:
        master.stop()
    else:
        master.state.fail_status[r"/signals/preemption$"] = status
    proc = run_wrapped(master, tmp_path / "log", DET_ALLOCATION_FENCE_SECONDS="1")
    try:
        code = proc.wait(timeout=20)
    finally:
        proc.kill()
        proc.wait()
    text = (tmp_path / "log").read_text()
    assert code == 128 + 15, text
    assert "no answer from the master for" in text and "fenced" in text, text


@pytest.mark.parametrize("status", [200, 403])
def test_a_master_that_answers_keeps_the_fence_away(
    master: FakeMaster, status: int, tmp_path: Path
) -> None:
    if status != 200:
        master.state.fail_status[r"/signals/preemption$"] = status
    proc = run_wrapped(master, tmp_path / "log", DET_ALLOCATION_FENCE_SECONDS="0.5")
    try:
        master.wait_for("/signals/preemption", count=10, timeout=20)  # 2 s of looks
        assert proc.poll() is None, (tmp_path / "log").read_text()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("15", 15.0), ("2.5", 2.5), ("0", None), ("", None), ("x", None), ("inf", None), ("-3", None)],
)
def test_the_fence_is_read_from_the_environment(value: str, seconds: float | None) -> None:
    assert allocation_watch.fence_seconds({allocation_watch.FENCE_ENV: value}) == seconds
    assert allocation_watch.fence_seconds({}) is None
