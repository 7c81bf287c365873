"""Waiting for the master (a real HTTP server) and the per-user state directory."""

from __future__ import annotations

import http.server
import json
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from det.deploy.common import automation, state
from det.deploy.common.errors import DeployError
from tests.fakes.local_http import TestHTTPServer


class _Master(http.server.BaseHTTPRequestHandler):
    failures_left = 2

    def do_GET(self) -> None:
        cls = type(self)
        if self.path != "/info":
            self.send_error(404)
        elif cls.failures_left > 0:
            cls.failures_left -= 1
            self.send_error(503)
        else:
            body = json.dumps({"clusterId": "abc", "version": "0.1.0"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def master() -> Iterator[str]:
    _Master.failures_left = 2
    server = TestHTTPServer(("127.0.0.1", 0), _Master)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_wait_for_master_polls_info_until_it_answers(master):
    clock = _Clock()
    info = automation.wait_for_master(master, 60, sleep=clock.sleep, clock=clock)
    assert info == {"clusterId": "abc", "version": "0.1.0"}
    assert clock.now == 10.0  # two failed polls, 5 s apart


def test_wait_for_master_gives_up_at_the_deadline(master):
    _Master.failures_left = 1000
    clock = _Clock()
    with pytest.raises(
        DeployError, match=r"did not answer within 12s \(HTTP 503\).*det-bootstrap.log"
    ):
        automation.wait_for_master(master, 12, sleep=clock.sleep, clock=clock)
    assert clock.now == 15.0


def test_wait_for_master_reports_connection_errors():
    clock = _Clock()
    with pytest.raises(DeployError, match="ConnectionError"):
        automation.wait_for_master("http://127.0.0.1:9", 0, sleep=clock.sleep, clock=clock)


def test_state_dir_follows_xdg_data_home(tmp_path: Path):
    assert state.state_dir({"XDG_DATA_HOME": str(tmp_path)}) == tmp_path / "det" / "pulumi"
    assert state.state_dir({}) == Path.home() / ".local" / "share" / "det" / "pulumi"


def test_passphrase_is_private_and_stable(tmp_path: Path):
    first = state.ensure_passphrase(tmp_path / "s")
    assert state.ensure_passphrase(tmp_path / "s") == first and len(first) >= 32
    mode = stat.S_IMODE(os.stat(tmp_path / "s" / "passphrase").st_mode)
    assert mode == 0o600


def test_list_stacks_reads_the_file_backend_layout(tmp_path: Path):
    stacks = tmp_path / ".pulumi" / "stacks" / "det-gcp"
    stacks.mkdir(parents=True)
    for name in ("b.json", "a.json", "a.json.bak", "c.json.gz", "gone.json.bak"):
        (stacks / name).write_text("{}")
    assert state.list_stacks(tmp_path, "det-gcp") == ["a", "b", "c"]
    assert state.list_stacks(tmp_path, "det-aws") == []


# --- the workspace's directory ------------------------------------------------------------------

FAKE_PULUMI = """#!/bin/sh
# Stands in for the Pulumi CLI: reports a version, refuses everything else.
if [ "$1" = "version" ]; then echo v3.200.0; exit 0; fi
echo "error: this is not a real pulumi" >&2
exit 1
"""


@pytest.fixture
def workspace_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in Pulumi CLI on PATH, the state under ``tmp_path``, and a temporary directory
    of the test's own (returned) for the workspace directories."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pulumi").write_text(FAKE_PULUMI)
    (bin_dir / "pulumi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "test")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    return tmp


def test_an_operation_leaves_no_workspace_directory(workspace_env: Path) -> None:
    # Pulumi's own default for an inline program is an automation-* temporary directory that
    # nothing removes: one per `det deploy` command was left in /tmp.
    with pytest.raises(DeployError, match="the Pulumi CLI failed"):
        automation.up("det-aws", "c1", lambda: None, {}, on_output=lambda line: None)
    with pytest.raises(DeployError):
        automation.outputs("det-aws", "c1")
    with pytest.raises(DeployError):
        automation.destroy("det-aws", "c1", on_output=lambda line: None)
    assert sorted(os.listdir(workspace_env)) == []


def test_listing_a_remote_states_stacks_leaves_no_workspace_directory(
    workspace_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(state.STATE_URL_ENV, "s3://det-state/team-a")
    with pytest.raises(DeployError, match="cannot list the stacks in s3://det-state/team-a"):
        automation.stack_names("det-aws")
    assert sorted(os.listdir(workspace_env)) == []
