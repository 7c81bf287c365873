"""Signal forwarding of a task's PID 1 (det.common.proc)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any

import pytest

from det.common import proc


def test_a_signal_that_arrives_while_the_child_starts_reaches_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_popen = subprocess.Popen

    def popen_after_a_sigterm(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)  # handled before the child exists
        time.sleep(0.05)  # (the Python-level handler runs at the next bytecode)
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(proc.subprocess, "Popen", popen_after_a_sigterm)
    before = signal.getsignal(signal.SIGTERM)
    started = time.monotonic()
    code = proc.run_forwarding(["sleep", "30"], group=True)
    assert code == 128 + signal.SIGTERM
    assert time.monotonic() - started < 20
    assert signal.getsignal(signal.SIGTERM) == before  # our handler is gone again


def test_group_members_reads_proc_and_leaves_out_zombies(tmp_path: Any) -> None:
    def stat(pid: int, comm: str, state: str, pgrp: int) -> None:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({comm}) {state} 1 {pgrp} {pgrp} 0 -1\n")

    stat(10, "python3", "S", 10)
    stat(11, "a (b) c", "R", 10)  # a name with spaces and parentheses
    stat(12, "sh", "Z", 10)  # exited, not yet collected: not running any more
    stat(13, "other", "S", 99)
    (tmp_path / "self").mkdir()
    assert sorted(proc.group_members(10, str(tmp_path)) or []) == [10, 11]
    assert proc.group_members(10, str(tmp_path / "missing")) is None


def test_a_group_member_that_ignores_sigterm_is_killed_when_the_grace_runs_out() -> None:
    child = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 30 & wait"], start_new_session=True)
    try:
        time.sleep(0.2)
        os.killpg(child.pid, signal.SIGTERM)
        assert proc.wait_for_group(child.pid, 0.5) is False
        # Gone within moments, though both members ignore SIGTERM and the sleep has 30 s to go
        # (SIGKILL's delivery takes a moment).
        assert proc.wait_for_group(child.pid, 5) is True
        status = child.wait(timeout=5)
        # A test process that is PID 1 (the harness's tests in a bare container) reaps every
        # child itself (proc._reap_orphans, as det.exec.run must): Popen then finds none to
        # collect and says 0. Elsewhere the status is the SIGKILL's.
        if os.getpid() != 1:
            assert status == -signal.SIGKILL
    finally:
        child.kill()
        child.wait()
