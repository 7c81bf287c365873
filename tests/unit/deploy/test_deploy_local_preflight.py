"""What ``up`` needs on the deployer's machine, checked before any cloud call and listed at once
(det.deploy.common.preflight.require_local), and the master image built before pass 1
(rollout.ensure_local_image)."""

from __future__ import annotations

import http.server
import io
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from det.deploy.common import preflight, rollout
from det.deploy.common.errors import DeployError

_RUN = "import sys; from det.cli.__main__ import main; sys.exit(main(sys.argv[1:]))"


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []

    def _any(self) -> None:
        self.seen.append(f"{self.command} {self.path}")
        self.send_response(599)
        self.end_headers()

    do_GET = do_POST = do_PUT = do_CONNECT = _any

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def cloud() -> Iterator[tuple[str, list[str]]]:
    """An endpoint and proxy that records every request: any cloud call fails the test."""
    _Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Recorder.seen
    server.shutdown()
    server.server_close()


def _env(tmp_path: Path, endpoint: str, bin_dir: Path, **extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("LANG", "SYSTEMROOT")}
    return {
        **keep,
        "PATH": str(bin_dir),  # neither pulumi nor docker
        "HOME": str(tmp_path / "home"),
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_EC2_METADATA_DISABLED": "true",
        "HTTP_PROXY": endpoint,
        "HTTPS_PROXY": endpoint,
        "NO_PROXY": "",
        **extra,
    }


def _det(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _RUN, *argv], capture_output=True, text=True, timeout=120, env=env
    )


def test_serverless_up_without_pulumi_and_docker_names_both_before_any_cloud_call(tmp_path, cloud):
    endpoint, seen = cloud
    (tmp_path / "bin").mkdir()
    env = _env(
        tmp_path,
        endpoint,
        tmp_path / "bin",
        AWS_ACCESS_KEY_ID="AKIAEXAMPLE",
        AWS_SECRET_ACCESS_KEY="secret",
    )
    argv = ["deploy", "aws", "up", "--cluster-id", "c1", "--keypair", "k"]
    done = _det([*argv, "--master", "serverless", "--yes"], env)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("  - ")]
    assert [line.split(":")[0] for line in lines] == ["  - pulumi", "  - docker"], done.stderr
    assert "nothing was created" in done.stderr
    assert seen == []


def test_gcp_up_lists_missing_credentials_with_the_tools(tmp_path, cloud):
    endpoint, seen = cloud
    (tmp_path / "bin").mkdir()
    env = _env(
        tmp_path,
        endpoint,
        tmp_path / "bin",
        # No ADC file, no gcloud config: google.auth's last place to look is the metadata server
        # of a GCE machine (a local address, through the recording proxy here), no Google API.
        CLOUDSDK_CONFIG=str(tmp_path / "gcloud"),
        GCE_METADATA_HOST="127.0.0.1:9",
        GCE_METADATA_IP="127.0.0.1:9",
    )
    argv = ["deploy", "gcp", "up", "--cluster-id", "c1", "--project-id", "p", "--yes"]
    done = _det(argv, env)
    assert done.returncode == 1, done.stderr
    heads = [line.split(":")[0] for line in done.stderr.splitlines() if line.startswith("  - ")]
    assert heads == ["  - pulumi", "  - docker", "  - credentials"], done.stderr
    assert all("//127.0.0.1:9/" in request for request in seen), seen


def test_gcp_up_with_credentials_found_locally_names_only_the_tools(tmp_path, cloud):
    endpoint, seen = cloud
    (tmp_path / "bin").mkdir()
    adc = tmp_path / "adc.json"
    adc.write_text(
        json.dumps(
            {
                "type": "authorized_user",
                "client_id": "x.apps.googleusercontent.com",
                "client_secret": "s",
                "refresh_token": "r",
            }
        )
    )
    env = _env(tmp_path, endpoint, tmp_path / "bin", GOOGLE_APPLICATION_CREDENTIALS=str(adc))
    argv = ["deploy", "gcp", "up", "--cluster-id", "c1", "--project-id", "p", "--yes"]
    done = _det([*argv, "--master", "vm"], env)
    heads = [line.split(":")[0] for line in done.stderr.splitlines() if line.startswith("  - ")]
    assert heads == ["  - pulumi"], done.stderr  # a VM master needs no Docker here
    assert seen == []


class _Docker:
    """A docker command as ``Machine.run`` calls it: answers by argv."""

    def __init__(self, answers: dict[str, tuple[int, str]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        code, text = self.answers.get(argv[1], (1, "unknown"))
        return subprocess.CompletedProcess(argv, code, text if code == 0 else "", text)


def _machine(tmp_path: Path, docker: _Docker, *, tools=("pulumi", "docker"), **kw: Any):
    tree = tmp_path / "tree"
    (tree / "infra").mkdir(parents=True, exist_ok=True)
    (tree / preflight.BUILD_SCRIPT).write_text("#!/bin/bash\n")
    return preflight.Machine(
        which=lambda name: f"/x/{name}" if name in tools else None,
        run=docker,
        env=kw.pop("env", {}),
        source_tree=lambda: tree,
        **kw,
    )


def test_an_unreachable_engine_is_one_line(tmp_path):
    docker = _Docker({"version": (1, "Cannot connect to the Docker daemon at unix:///x.sock")})
    lines = preflight.missing_locally(
        docker_for="--master serverless", master_image=True, credentials=None,
        machine=_machine(tmp_path, docker),
    )  # fmt: skip
    assert len(lines) == 1 and "not reachable (Cannot connect" in lines[0]


def test_an_arm64_engine_needs_amd64_emulation_for_the_official_base(tmp_path):
    no_buildx = _Docker({"version": (0, "arm64"), "buildx": (1, "not a docker command")})
    lines = preflight.missing_locally(
        docker_for="x", master_image=True, credentials=None, machine=_machine(tmp_path, no_buildx)
    )
    assert len(lines) == 1 and "cannot build linux/amd64" in lines[0]
    emulated = _Docker(
        {"version": (0, "arm64"), "buildx": (0, "default * docker\n  linux/arm64, linux/amd64")}
    )
    machine = _machine(tmp_path, emulated)
    assert (
        preflight.missing_locally(
            docker_for="x", master_image=True, credentials=None, machine=machine
        )
        == []
    )


def test_the_debootstrap_base_needs_amd64_root_and_debootstrap(tmp_path):
    docker = _Docker({"version": (0, "arm64")})
    machine = _machine(
        tmp_path, docker, env={preflight.MASTER_BASE_ENV: "debootstrap"}, is_root=lambda: False
    )
    lines = preflight.missing_locally(
        docker_for="x", master_image=True, credentials="no AWS credentials found", machine=machine
    )
    assert len(lines) == 4, lines
    assert "(arm64)" in lines[0] and "root" in lines[1] and "debootstrap" in lines[2]
    assert lines[3] == "credentials: no AWS credentials found"


def test_an_installed_det_without_a_checkout_cannot_build_the_image(tmp_path):
    docker = _Docker({"version": (0, "amd64")})
    machine = preflight.Machine(
        which=lambda name: "/x/" + name, run=docker, env={}, source_tree=lambda: None
    )
    (line,) = preflight.missing_locally(
        docker_for="x", master_image=True, credentials=None, machine=machine
    )
    assert "install det from a clone" in line


def test_require_local_raises_one_error_listing_each_line(tmp_path):
    docker = _Docker({})
    with pytest.raises(DeployError) as e:
        preflight.require_local(
            docker_for="--master serverless",
            master_image=True,
            credentials=lambda: "no AWS credentials found",
            machine=_machine(tmp_path, docker, tools=()),
        )
    assert str(e.value).count("\n  - ") == 3


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A det source checkout to build from, whatever installed det here (a wheel, on 3.13)."""
    from det.deploy.common import release

    script = tmp_path / "src" / preflight.BUILD_SCRIPT
    script.parent.mkdir(parents=True)
    script.write_text("exit 1\n")
    monkeypatch.setattr(release, "source_tree", lambda: tmp_path / "src")
    return tmp_path / "src"


def test_without_a_checkout_a_missing_image_is_named_with_how_to_build_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from det.deploy.common import release

    monkeypatch.setattr(release, "source_tree", lambda: None)

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        assert argv[:3] == ["docker", "image", "inspect"], argv  # nothing is built
        return subprocess.CompletedProcess(argv, 1, "", "No such image")

    with pytest.raises(DeployError, match=r"no det source checkout to build it from"):
        rollout.ensure_local_image("det-master:0123456789ab", io.StringIO(), run, env={})


@pytest.mark.usefixtures("checkout")
def test_up_builds_a_missing_master_image_with_the_chosen_base(tmp_path):
    calls: list[tuple[list[str], dict[str, str]]] = []
    built: set[str] = set()

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        calls.append((argv, kw.get("env") or {}))
        if argv[:3] == ["docker", "image", "inspect"]:
            return subprocess.CompletedProcess(argv, 0 if argv[3] in built else 1, "", "nope")
        if argv[0] == "bash":
            built.add("det-master:0123456789ab")
            return subprocess.CompletedProcess(argv, 0, "", "")
        raise AssertionError(argv)

    out = io.StringIO()
    rollout.ensure_local_image("det-master:0123456789ab", out, run, env={})
    (script, env) = calls[1]
    assert script[1].endswith(preflight.BUILD_SCRIPT) and script[2] == "master"
    assert env["MASTER_BASE"] == "official" and "linux/amd64" in out.getvalue()
    calls.clear()
    rollout.ensure_local_image("det-master:0123456789ab", out, run, env={})
    assert len(calls) == 1  # present: nothing to build


@pytest.mark.usefixtures("checkout")
def test_a_failed_build_is_one_line_before_pass_one(tmp_path):
    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        if argv[0] == "bash":
            return subprocess.CompletedProcess(argv, 1, "", "x\n[build-images] ERROR: no net")
        return subprocess.CompletedProcess(argv, 1, "", "No such image")

    with pytest.raises(DeployError, match=r"building the master image failed: .*no net"):
        rollout.ensure_local_image("det-master:0123456789ab", io.StringIO(), run, env={})
