"""``det deploy local``: the one-line refusal without Docker, and a real cluster's life cycle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.e2e.local_helpers import local_docker, local_state_dir  # noqa: F401 (fixture)
from tests.ports import free_port_pair

DET = [sys.executable, "-m", "det.cli"]


def _det(
    args: list[str], env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DET, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _env(state: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DET_", "DOCKER_"))}
    env["DET_LOCAL_STATE_DIR"] = str(state)
    env.update(extra)
    return env


def test_up_without_docker_engine_prints_one_line_and_creates_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = _env(state, DOCKER_HOST=f"unix://{tmp_path}/no-such-docker.sock")
    r = _det(
        ["deploy", "local", "up", "--agents", "1", "--master-port", str(free_port_pair())], env, 60
    )
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "docker" in lines[0].lower()
    assert "install" in lines[0] or "start dockerd" in lines[0], lines[0]
    assert "Traceback" not in r.stderr
    assert r.stdout.strip() == ""
    assert not state.exists()


def _pids_alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[-1].split()[0] != "Z":
            alive.append(pid)
    return alive


@pytest.mark.e2e
@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.usefixtures("local_docker")
def test_up_status_down_runs_a_cluster_and_stops_every_process() -> None:
    with local_state_dir() as state:
        _cluster_life_cycle(state)


def _cluster_life_cycle(state: Path) -> None:
    port = free_port_pair()
    env = _env(state)
    up = ["deploy", "local", "up", "--agents", "2", "--slots-per-agent", "2"]
    try:
        r = _det([*up, "--master-port", str(port), "--initial-user-password", "Local-pw-123"], env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"export DET_MASTER=http://127.0.0.1:{port}" in r.stdout
        webui = f"http://127.0.0.1:{port}/det/"
        assert f"WebUI: {webui}" in r.stdout
        assert "text/html" in requests.get(webui, timeout=10).headers["Content-Type"]
        assert (state / "admin_password").read_text().strip() == "Local-pw-123"
        assert (state / "admin_password").stat().st_mode & 0o077 == 0

        r = _det(["deploy", "local", "status", "--json"], env, 60)
        assert r.returncode == 0, r.stderr
        status = json.loads(r.stdout)
        assert status["master"]["answering"] is True
        agents = {a["id"]: a for a in status["agents"]}
        assert set(agents) == {"local-agent-0", "local-agent-1"}
        assert all(a["running"] and a["registered"] and a["slots"] == 2 for a in agents.values())

        login = requests.post(
            f"http://127.0.0.1:{port}/api/v1/auth/login",
            json={"username": "admin", "password": "Local-pw-123"},
            timeout=10,
        )
        assert login.ok, login.text

        r = _det([*up, "--master-port", str(port)], env)
        assert r.returncode == 0, r.stderr
        assert "already running" in r.stdout

        pids = [status["master"]["pid"], *(a["pid"] for a in agents.values())]
        postgres_pid = int(
            (state / "master" / "postgres" / "postmaster.pid").read_text().split()[0]
        )
    finally:
        r = _det(["deploy", "local", "down"], env, 180)
    assert r.returncode == 0, r.stderr
    assert "stopped: master" in r.stdout
    deadline = time.monotonic() + 10
    while _pids_alive([*pids, postgres_pid]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _pids_alive([*pids, postgres_pid]) == []
    assert (state / "master").is_dir()  # data kept without --delete-data

    r = _det(["deploy", "local", "status"], env, 60)
    assert r.returncode == 3
    assert "master: not running" in r.stdout

    r = _det(["deploy", "local", "down", "--delete-data"], env, 60)
    assert r.returncode == 0
    assert not state.exists()
