"""The embedded PostgreSQL (no ``db`` in master.yaml) stops with the master on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.integration.conftest import free_port

pytestmark = pytest.mark.integration


def _postmaster_pid(pgdata: Path) -> int | None:
    pidfile = pgdata / "postmaster.pid"
    if not pidfile.exists():
        return None
    return int(pidfile.read_text().splitlines()[0])


def _alive(pid: int) -> bool:
    """Running: a zombie (ended, not yet reaped by its parent, the init of a container that
    does not reap) is not."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_sigterm_stops_the_master_and_its_embedded_postgres(tmp_path: Path) -> None:
    port = free_port()
    data = tmp_path / "data"
    cfg = tmp_path / "master.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "port": port,
                "bind_address": "127.0.0.1",
                "data_dir": str(data),
                "security": {"initial_user_password": "Embedded-pw-1"},
            }
        )
    )
    with (tmp_path / "master.log").open("w") as log:
        _run(tmp_path, cfg, port, data, log)


def _run(tmp_path: Path, cfg: Path, port: int, data: Path, log: Any) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "det.master", "--config-file", str(cfg)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{port}/info", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            assert proc.poll() is None, (tmp_path / "master.log").read_text()
            assert time.monotonic() < deadline, "the master did not start"
            time.sleep(0.5)
        pg = _postmaster_pid(data / "postgres")
        assert pg is not None and _alive(pg)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, (tmp_path / "master.log").read_text()
        deadline = time.monotonic() + 30
        while _alive(pg):
            assert time.monotonic() < deadline, "the embedded PostgreSQL outlived the master"
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        pg = _postmaster_pid(data / "postgres")
        if pg is not None and _alive(pg):
            os.kill(pg, signal.SIGTERM)
