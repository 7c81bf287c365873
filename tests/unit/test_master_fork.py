"""The tests' forked masters (tests/master_fork.py) behave as ``python -m det.master`` does:
the arguments, environment and working directory they are given, not the fork server's; their
output in their log; the exit code a fresh interpreter would give."""

from __future__ import annotations

import gc
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests import master_fork


@pytest.fixture(params=["fork", "fresh"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("DET_TEST_MASTER_FORK", "1" if request.param == "fork" else "0")
    return str(request.param)


def test_a_bad_config_exits_2_with_its_reason_in_the_log(tmp_path: Path, mode: str) -> None:
    (tmp_path / "master.yaml").write_text("port: -1\n")
    env = {**os.environ, "DET_CONFIG_FILE": "master.yaml", "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "master.log"
    here = Path.cwd()
    os.chdir(tmp_path)  # the relative DET_CONFIG_FILE resolves in the master's own directory
    try:
        proc = master_fork.start([], env, str(log))
    finally:
        os.chdir(here)
    assert proc.wait(timeout=60) == 2
    assert proc.returncode == 2 and proc.poll() == 2
    text = log.read_text()
    assert "det-master: invalid master config" in text and "port" in text, text


def test_a_missing_config_file_names_it(tmp_path: Path, mode: str) -> None:
    missing = tmp_path / "nowhere.yaml"
    log = tmp_path / "master.log"
    proc = master_fork.start(["--config-file", str(missing)], dict(os.environ), str(log))
    assert proc.wait(timeout=60) == 2
    assert str(missing) in log.read_text()


def test_a_signal_ends_it_with_the_negative_signal_number(tmp_path: Path, mode: str) -> None:
    fifo = tmp_path / "master.yaml"
    os.mkfifo(fifo)  # the master blocks reading its config until a writer comes
    proc = master_fork.start(["--config-file", str(fifo)], dict(os.environ), str(tmp_path / "log"))
    assert proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    proc.kill()  # a no-op once it has ended, as Popen's


def _heap_report(conn: Any) -> None:
    """In a process forked by the fork server: which preloads it inherited, how many objects it
    starts with frozen, and how many the collector still tracks."""
    import sys

    conn.send(
        (
            sorted(m for m in master_fork.PRELOAD if m in sys.modules),
            gc.get_freeze_count(),
            len(gc.get_objects()),
        )
    )
    conn.close()


def test_a_forked_master_starts_with_det_imported_and_the_servers_heap_frozen() -> None:
    """Both preloads took (multiprocessing skips one that fails to import, silently): a fork
    has det's master imported, and most of its heap frozen, so a master's start-up collection
    does not scan what every fork inherits (tests/master_fork_heap.py)."""
    ctx = master_fork._forkserver()
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_heap_report, args=(send,), daemon=True)
    child.start()
    send.close()
    try:
        assert receive.poll(60), "the forked process did not answer"
        modules, frozen, tracked = receive.recv()
    finally:
        child.join(30)
    assert modules == sorted(master_fork.PRELOAD)
    assert frozen > tracked, (frozen, tracked)
