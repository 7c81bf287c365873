"""``det deploy local`` without Docker: its master.yaml, state layout, processes and CLI flags."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import yaml

from det.deploy.common.errors import DeployError
from det.deploy.local import cluster, commands, engine, procs
from det.deploy.local.paths import LocalPaths, default_state_dir, write_private
from det.master.config import parse_config
from tests.fakes.local_http import TestHTTPServer


def test_generated_master_yaml_is_accepted_by_the_master(tmp_path: Path) -> None:
    paths = LocalPaths.at(tmp_path)
    text = yaml.safe_dump(cluster.master_config(paths, 18123, "Pw-123456"))
    config = parse_config(yaml.safe_load(text), env={})
    assert config.port == 18123
    assert config.url() == "http://127.0.0.1:18123"
    assert config.db is None  # the embedded PostgreSQL, under the state directory
    assert config.data_dir == tmp_path / "master"
    assert config.security.initial_user_password == "Pw-123456"
    assert config.checkpoint_storage == {
        "type": "shared_fs",
        "host_path": str(tmp_path / "checkpoints"),
    }
    tcd = config.task_container_defaults
    assert tcd["image"]["cpu"] == engine.TASK_IMAGE
    # Checkpoints reach the host: the storage directory is mounted into every task.
    assert {"host_path": str(paths.checkpoints), "container_path": str(paths.checkpoints)} in tcd[
        "bind_mounts"
    ]


def test_state_dir_comes_from_env_then_xdg_then_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DET_LOCAL_STATE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_state_dir() == tmp_path / "explicit"
    monkeypatch.delenv("DET_LOCAL_STATE_DIR")
    assert default_state_dir() == tmp_path / "xdg" / "det" / "local"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_state_dir() == tmp_path / "home" / ".local" / "share" / "det" / "local"


def test_generated_passwords_mix_cases_and_digits_and_differ() -> None:
    seen = {cluster.generate_password() for _ in range(20)}
    assert len(seen) == 20
    for pw in seen:
        assert len(pw) == 16
        assert any(c.isupper() for c in pw) and any(c.islower() for c in pw)
        assert any(c.isdigit() for c in pw)


def test_password_is_private_and_kept_across_runs(tmp_path: Path) -> None:
    paths = LocalPaths.at(tmp_path)
    notes: list[str] = []
    first, generated = cluster._password(paths, None, notes.append)
    assert generated
    assert paths.password_file.stat().st_mode & 0o777 == 0o600
    (paths.data_dir / "postgres").mkdir(parents=True)  # the cluster's database now exists
    again, generated = cluster._password(paths, "Other-pw-1", notes.append)
    assert (again, generated) == (first, False)
    assert notes and "only applies to a new cluster" in notes[0]


def test_write_private_tightens_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("old")
    path.chmod(0o644)
    write_private(path, "new")
    assert path.read_text() == "new"
    assert path.stat().st_mode & 0o777 == 0o600


def test_alive_requires_the_marker_and_stop_terminates(tmp_path: Path) -> None:
    script = "import time\nwhile True: time.sleep(0.1)\n"
    pid = procs.start(
        [sys.executable, "-c", script, "det.agent"],
        tmp_path / "p.log",
        tmp_path / "p.pid",
        procs.clean_env(),
    )
    try:
        assert procs.read_pid(tmp_path / "p.pid") == pid
        deadline = time.monotonic() + 10  # until the child has exec'd, its cmdline is ours
        while not procs.alive(pid, "det.agent") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert procs.alive(pid, "det.agent")
        assert not procs.alive(pid, "det.master")
        assert procs.stop(pid, "det.agent", grace=10) is False  # SIGTERM was enough
        assert not procs.alive(pid, None)
    finally:
        if procs.alive(pid, None):
            procs.stop(pid, "det.agent", grace=1)


def test_clean_env_drops_det_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_PORT", "1")
    monkeypatch.setenv("DET_DB_URL", "postgresql://elsewhere")
    env = procs.clean_env({"X": "y"})
    assert not [k for k in env if k.startswith("DET_")]
    assert env["X"] == "y"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="det deploy")
    commands.add_parsers(parser.add_subparsers(dest="cloud"))
    return parser


def test_cli_flags_and_determined_aliases() -> None:
    p = _parser()
    args = p.parse_args(
        ["local", "cluster-up", "--agents", "3", "--slots-per-agent", "2", "--master-port", "9090",
         "--initial-user-password", "Pw-1"]
    )  # fmt: skip
    assert (args.agents, args.slots_per_agent, args.master_port) == (3, 2, 9090)
    assert args.initial_user_password == "Pw-1" and callable(args.func)
    assert p.parse_args(["local", "cluster-down", "--delete-data"]).delete_data is True
    assert p.parse_args(["local", "status", "--json"]).json is True
    defaults = p.parse_args(["local", "up"])
    assert (defaults.agents, defaults.slots_per_agent, defaults.master_port) == (1, 1, 8080)


def test_status_of_an_empty_state_dir_says_not_running(tmp_path: Path) -> None:
    s = cluster.status(tmp_path / "nothing")
    assert s["running"] is False and s["agents"] == []
    assert cluster.down(state_dir=tmp_path / "nothing") == {
        "agents": [], "master": False, "containers": 0, "deleted": False
    }  # fmt: skip
    assert not (tmp_path / "nothing").exists()


def test_no_engine_message_is_one_line_naming_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nowhere.sock")
    for error in ("", "Permission denied"):
        message = engine.no_engine_message(error)
        assert "\n" not in message
        assert "docker" in message.lower()
    assert "usermod" in engine.no_engine_message("Permission denied")


def test_local_policy_denies_by_default_and_protects_the_clusters_own_state(
    tmp_path: Path,
) -> None:
    from det.master.container_policy import refusals, request_of, trusted_of

    paths = LocalPaths.at(tmp_path)

    def refused_by(roots: list[str]) -> Callable[[str, bool], bool]:
        config = parse_config(cluster.master_config(paths, 18123, "Pw-123456", roots), env={})
        policy = config.task_container_policy_for("default")
        trusted = trusted_of(
            config.task_container_defaults, config.checkpoint_storage, [str(config.data_dir)]
        )

        def refused(host: str, read_only: bool = False) -> bool:
            task = {
                "bind_mounts": [{"host_path": host, "container_path": "/x", "read_only": read_only}]
            }
            return bool(list(refusals(request_of(task), policy, trusted)))

        return refused

    refused = refused_by([])
    assert not refused(str(paths.checkpoints))  # as the cluster mounts it
    assert refused(str(paths.checkpoints / "run-1"))  # tasks write there: links, swaps
    assert refused("/home/someone/data", True)  # nothing else by default
    for host in (
        paths.root,
        paths.password_file,
        paths.agent_token,
        paths.data_dir / "postgres",
        paths.agent_state("local-agent-0"),
        "/etc",
        "/root",
        "/var/run/docker.sock",
    ):
        assert refused(str(host)), host

    # Another local cluster of this user (in the default place) stays out of reach even under
    # a wide allowed root.
    other = cluster._clusters_home() / "local"
    assert refused_by([str(other.parent.parent)])(str(other / "admin_password"), True)

    refused = refused_by(["/home/someone/data", "/scratch:rw"])
    assert not refused("/home/someone/data/imagenet", True)
    assert refused("/home/someone/data/imagenet", False)  # read-only unless :rw
    assert not refused("/scratch")
    assert refused("/scratch/mine")  # writable: the directory itself only


def test_allow_mount_must_be_an_absolute_path() -> None:
    assert cluster.mount_root("/data/") == {"host_path": "/data", "read_only": True}
    assert cluster.mount_root("/data:rw") == {"host_path": "/data", "read_only": False}
    with pytest.raises(DeployError, match="--allow-mount data: must be an absolute host path"):
        cluster.mount_root("data")


def test_waiting_for_agents_asks_a_slow_master_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A master that answers one poll too slowly (a loaded machine, the demo's image build beside
    it) is asked again; before, the first ReadTimeout ended ``det deploy local up``."""
    calls: list[str] = []

    class Master(BaseHTTPRequestHandler):
        def _answer(self, body: dict[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # the login
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._answer({"token": "t"})

        def do_GET(self) -> None:  # the agents: the first answer comes after the client gave up
            calls.append(self.path)
            if len(calls) == 1:
                time.sleep(1.0)
            self._answer({"agents": [{"id": "local-agent-0"}]})

        def log_message(self, *args: object) -> None:
            pass

    server = TestHTTPServer(("127.0.0.1", 0), Master)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    paths = LocalPaths.at(tmp_path)
    paths.agents_dir.mkdir(parents=True)
    agent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        paths.agent_pid("local-agent-0").write_text(f"{agent.pid}\n")
        monkeypatch.setattr(cluster, "REQUEST_TIMEOUT", 0.2)
        notes: list[str] = []
        url = f"http://127.0.0.1:{server.server_address[1]}"
        cluster._wait_for_agents(url, "pw", ["local-agent-0"], paths, notes.append)
        assert len(calls) >= 2 and calls[0] == "/api/v1/agents"
    finally:
        agent.kill()
        agent.wait()
        server.shutdown()
        server.server_close()
