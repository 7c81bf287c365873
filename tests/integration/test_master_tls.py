"""HTTPS: the master serves ``security.tls``; our CLI, the official client, an agent and the
harness in a real task container verify its certificate (DET_MASTER_CERT_FILE/_NAME)."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from det.common import tls
from det.master import tls as master_tls
from tests.docker_support import docker_client
from tests.integration.cli_support import REPO, run_subprocess
from tests.integration.conftest import ADMIN_PASSWORD, Master, free_port, master_config

TASK_IMAGE_BARE = "det-base:bookworm"  # Debian's Python 3.11, nothing of det


@dataclass
class Cert:
    cert: Path
    key: Path


def make_cert(dir: Path, name: str, san: str) -> Cert:
    """A self-signed certificate and its key, valid for ``san`` (openssl's subjectAltName)."""
    dir.mkdir(parents=True, exist_ok=True)
    cert, key = dir / f"{name}.crt", dir / f"{name}.key"
    argv = [
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", str(key), "-out", str(cert), "-subj", f"/CN={name}",
        "-addext", f"subjectAltName={san}",
    ]  # fmt: skip
    subprocess.run(
        argv,
        check=True,
        capture_output=True,
    )
    return Cert(cert, key)


@pytest.fixture
def local_cert(tmp_path: Path) -> Cert:
    return make_cert(tmp_path / "tls", "localhost", "IP:127.0.0.1,DNS:localhost")


def write_master_config(tmp: Path, db_url: str, port: int, extra: dict[str, Any]) -> Path:
    (tmp / "data").mkdir(parents=True, exist_ok=True)
    config = master_config(tmp, db_url, port)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    path = tmp / "master.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def start_tls_master(
    tmp: Path, db_url: str, cert: Cert, cert_name: str | None = None, **extra: Any
) -> Master:
    """A det-master serving HTTPS with ``cert``; ready once ``/info`` answers over TLS (checked
    against ``cert_name`` when the certificate is not for 127.0.0.1)."""
    port = free_port()
    security = {"tls": {"cert": str(cert.cert), "key": str(cert.key)}}
    config_file = write_master_config(tmp, db_url, port, {"security": security, **extra})
    log_file = tmp / "master.log"
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "det.master", "--config-file", str(config_file)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    m = Master(f"https://127.0.0.1:{port}", tmp / "data", config_file, log_file, proc)
    http = tls.session(tls.load(str(cert.cert), cert_name))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"master exited with {proc.returncode}:\n{m.logs()}")
        try:
            r = http.get(m.url + "/info", timeout=2)
            if r.status_code == 200:
                return m
        except requests.exceptions.SSLError:
            proc.kill()
            proc.wait()
            raise
        except requests.RequestException:
            pass
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"master did not come up:\n{m.logs()}")


@pytest.fixture
def tls_master_factory(tmp_path: Path, pg_url: str) -> Iterator[Any]:
    started: list[Master] = []

    def make(cert: Cert, cert_name: str | None = None, **extra: Any) -> Master:
        m = start_tls_master(tmp_path / f"m{len(started)}", pg_url, cert, cert_name, **extra)
        started.append(m)
        return m

    yield make
    for m in started:
        m.kill(signal.SIGTERM if m.proc.poll() is None else signal.SIGKILL)


def det_cli(master: Master, home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {"DET_MASTER_CERT_FILE": "", "DET_MASTER_CERT_NAME": "", "DET_USER": "", "DET_PASS": ""}
    return run_subprocess(master.url, home, *args, env={**base, **env})


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got:\n{text}"
    return lines[0]


# ---- the master ---------------------------------------------------------------------------


def test_master_serves_https_only_with_its_certificate(
    tls_master_factory: Any, local_cert: Cert
) -> None:
    m = tls_master_factory(local_cert)
    info = requests.get(m.url + "/info", verify=str(local_cert.cert), timeout=10).json()
    assert info["clusterId"]
    # The certificate served is the configured one.
    served = ssl.get_server_certificate(("127.0.0.1", int(m.url.rsplit(":", 1)[1])))
    assert ssl.PEM_cert_to_DER_cert(served) == ssl.PEM_cert_to_DER_cert(local_cert.cert.read_text())
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(m.url + "/info", timeout=10)  # the public CAs do not vouch for it
    # Plain HTTP on the HTTPS port is told to use HTTPS, and the master keeps serving.
    plain = requests.get(m.url.replace("https://", "http://") + "/info", timeout=10)
    assert plain.status_code == 400 and "use an https:// URL" in plain.text
    assert requests.get(m.url + "/info", verify=str(local_cert.cert), timeout=10).ok


def test_a_silent_client_does_not_hold_up_others(tls_master_factory: Any, local_cert: Cert) -> None:
    """The handshake runs in the server's loop, not in a thread that would wait for it."""
    m = tls_master_factory(local_cert)
    port = int(m.url.rsplit(":", 1)[1])
    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
    # Threads waiting for the silent handshakes would hold each request for the server's
    # HANDSHAKE_SECONDS (30): each request's limit sits well below that and well above what a
    # handshake takes on a loaded machine (a bound on the five together depended on the load).
    assert master_tls.HANDSHAKE_SECONDS >= 30
    try:
        for _ in range(5):  # a new connection (and handshake) each time
            assert requests.get(m.url + "/info", verify=str(local_cert.cert), timeout=15).ok
    finally:
        for c in silent:
            c.close()


def test_several_api_processes_serve_https(tls_master_factory: Any, local_cert: Cert) -> None:
    m = tls_master_factory(local_cert, api_processes=3)
    from concurrent.futures import ThreadPoolExecutor

    def info(_: int) -> int:
        r = requests.get(m.url + "/info", verify=str(local_cert.cert), timeout=10)
        return r.status_code

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(info, range(60))) == {200}
    token = requests.post(
        m.url + "/api/v1/auth/login",
        json={"username": "admin", "password": ADMIN_PASSWORD},
        verify=str(local_cert.cert),
        timeout=10,
    ).json()["token"]
    assert token


@pytest.mark.parametrize(
    "breakage, expected",
    [
        ("missing key", "security.tls.key: cannot read {key}: No such file or directory"),
        ("missing cert", "security.tls.cert: cannot read {cert}: No such file or directory"),
        ("garbage cert", "security.tls.cert: {cert} is not a PEM certificate"),
        ("other key", "security.tls.key: {key} is not the private key of the certificate"),
        ("cert only", "invalid master config: security.tls: cert and key go"),
    ],
)
def test_master_refuses_to_start_with_a_bad_certificate_or_key(
    tmp_path: Path, pg_url: str, local_cert: Cert, breakage: str, expected: str
) -> None:
    cert, key = local_cert.cert, local_cert.key
    tls: dict[str, Any] = {"cert": str(cert), "key": str(key)}
    if breakage == "missing key":
        key = tmp_path / "nowhere" / "master.key"
        tls["key"] = str(key)
    elif breakage == "missing cert":
        cert = tmp_path / "nowhere" / "master.crt"
        tls["cert"] = str(cert)
    elif breakage == "garbage cert":
        cert = tmp_path / "garbage.crt"
        cert.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
        tls["cert"] = str(cert)
    elif breakage == "other key":
        key = make_cert(tmp_path / "other", "other", "DNS:other").key
        tls["key"] = str(key)
    elif breakage == "cert only":
        del tls["key"]
    config_file = write_master_config(tmp_path, pg_url, free_port(), {"security": {"tls": tls}})
    proc = subprocess.run(
        [sys.executable, "-m", "det.master", "--config-file", str(config_file)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert line.startswith("det-master: " + expected.format(cert=cert, key=key)), line


# ---- our CLI --------------------------------------------------------------------------------


def test_cli_trusts_the_master_with_det_master_cert_file(
    tls_master_factory: Any, local_cert: Cert, tmp_path: Path
) -> None:
    m = tls_master_factory(local_cert)
    home = tmp_path / "home"
    home.mkdir()
    trusted = {"DET_MASTER_CERT_FILE": str(local_cert.cert)}
    r = det_cli(m, home, "user", "login", "admin", DET_PASS=ADMIN_PASSWORD, **trusted)
    assert r.returncode == 0, r.stderr
    r = det_cli(m, home, "experiment", "list", **trusted)
    assert r.returncode == 0, r.stderr
    r = det_cli(m, home, "master", "info", **trusted)
    assert r.returncode == 0 and "clusterId" in r.stdout, r.stderr
    # noverify: Determined's way to skip the check (no warnings printed).
    r = det_cli(m, home, "experiment", "list", DET_MASTER_CERT_FILE="noverify")
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr

    # Without the certificate: one line that names the problem and the fix, for every path.
    for args in (("experiment", "list"), ("master", "info"), ("user", "login", "admin")):
        r = det_cli(m, home, *args, DET_PASS=ADMIN_PASSWORD)
        assert r.returncode != 0
        line = one_line(r.stderr)
        assert f"cannot verify the master's TLS certificate at {m.url}" in line, line
        assert "self-signed certificate" in line and "DET_MASTER_CERT_FILE" in line, line

    # http:// to the HTTPS master: the master's clear-text answer says what to do.
    plain_url = m.url.replace("https://", "http://")
    for args in (("experiment", "list"), ("master", "info")):
        r = run_subprocess(plain_url, home, *args, env={"DET_PASS": ADMIN_PASSWORD})
        assert r.returncode != 0
        assert "use an https:// URL" in one_line(r.stderr), r.stderr

    r = det_cli(m, home, "experiment", "list", DET_MASTER_CERT_FILE=str(tmp_path / "no.crt"))
    assert r.returncode != 0
    line = one_line(r.stderr)
    assert f"DET_MASTER_CERT_FILE={tmp_path / 'no.crt'}: cannot read the certificate" in line


def test_cli_checks_the_name_in_det_master_cert_name(
    tls_master_factory: Any, tmp_path: Path
) -> None:
    """A certificate issued only for ``det-master``, dialled by IP address."""
    cert = make_cert(tmp_path / "tls", "det-master", "DNS:det-master")
    m = tls_master_factory(cert, "det-master")
    home = tmp_path / "home"
    home.mkdir()
    trusted = {"DET_MASTER_CERT_FILE": str(cert.cert)}
    r = det_cli(m, home, "user", "login", "admin", DET_PASS=ADMIN_PASSWORD, **trusted)
    assert r.returncode != 0
    line = one_line(r.stderr)
    assert "cannot verify the master's TLS certificate" in line, line
    assert "127.0.0.1" in line and "DET_MASTER_CERT_NAME" in line, line

    named = {**trusted, "DET_MASTER_CERT_NAME": "det-master"}
    r = det_cli(m, home, "user", "login", "admin", DET_PASS=ADMIN_PASSWORD, **named)
    assert r.returncode == 0, r.stderr
    r = det_cli(m, home, "experiment", "list", **named)
    assert r.returncode == 0, r.stderr
    r = det_cli(m, home, "experiment", "list", **trusted, DET_MASTER_CERT_NAME="elsewhere")
    assert r.returncode != 0 and "DET_MASTER_CERT_NAME" in one_line(r.stderr)


# ---- an agent and the harness in a real task container ----------------------------------


@pytest.mark.docker
def test_agent_and_harness_verify_the_master(
    tmp_path: Path, pg_url: str, local_cert: Cert, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real agent registers over HTTPS with master_cert_file, and a trial in a bare Debian
    image (no det: the harness bundle with its vendored requests) completes against the HTTPS
    master, which its harness could only reach through the mounted certificate."""
    from tests.e2e.cluster import Cluster, master_extra, wait_for

    client = docker_client(TASK_IMAGE_BARE)
    plain_env = {k: v for k, v in os.environ.items() if not k.startswith("DET_MASTER_CERT")}
    plain_env["PYTHONUNBUFFERED"] = "1"
    m = start_tls_master(tmp_path / "master", pg_url, local_cert, **master_extra(tmp_path))
    # This test process's own requests (the Cluster helpers) trust the certificate.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(local_cert.cert))
    cluster = Cluster(m, [], tmp_path, client, tmp_path / "checkpoints", pg_url)
    agent_id = f"tls-{os.urandom(3).hex()}"
    argv = [
        sys.executable, "-m", "det.agent",
        "--master-url", m.url,
        "--agent-id", agent_id,
        f"--agent-token={m.agent_token}",
        "--slot-type", "cpu",
        "--artificial-slots", "1",
        "--heartbeat-seconds", "0.2",
        "--state-dir", str(tmp_path / "agent-state"),
    ]  # fmt: skip
    procs: list[subprocess.Popen[bytes]] = []

    def start_agent(log: Path, *extra: str) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            p = subprocess.Popen(
                [*argv, *extra], stdout=out, stderr=subprocess.STDOUT, env=plain_env
            )
        procs.append(p)
        return p

    try:
        # Without the certificate: the agent says why it cannot register, and keeps trying.
        log = tmp_path / "agent-nocert.log"
        p = start_agent(log)
        wait_for(lambda: "cannot verify" in log.read_text(), 30, "the agent's certificate error")
        line = next(x for x in log.read_text().splitlines() if "cannot verify" in x)
        assert f"cannot verify the master's TLS certificate at {m.url}" in line, line
        assert "self-signed certificate; set master_cert_file" in line, line
        assert "Traceback" not in log.read_text()
        assert p.poll() is None
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)

        # With master_cert_file (from agent.yaml): registers and runs a trial.
        config = tmp_path / "agent.yaml"
        config.write_text(yaml.safe_dump({"master_cert_file": str(local_cert.cert)}))
        log = tmp_path / "agent.log"
        start_agent(log, "--config-file", str(config))

        def registered() -> bool:
            return any(a["id"] == agent_id for a in m.get("/api/v1/agents")["agents"] or [])

        wait_for(registered, 60, "the agent to register over HTTPS")
        example = REPO / "examples" / "stdlib_core_api"
        overrides = {
            "environment": {"image": TASK_IMAGE_BARE},
            "searcher": {"max_length": {"batches": 20}},
            "hyperparameters": {"report_every": 5, "checkpoint_every": 10},
        }
        eid = cluster.create(example / "const.yaml", example, overrides)
        try:
            cluster.wait_state(eid, "STATE_COMPLETED", 300)
        except (TimeoutError, AssertionError) as e:
            raise AssertionError(f"{e}\n{cluster.dump()}\n{tail(log)}") from None
        (trial,) = cluster.trials(eid)
        assert cluster.metrics(trial["id"], "validation"), "the harness reported no validation"
        assert cluster.checkpoints_of(trial["id"])
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=30)
        for c in client.containers.list(
            all=True, ignore_removed=True, filters={"label": f"ai.det.agent-id={agent_id}"}
        ):
            c.remove(force=True)
        m.kill(signal.SIGTERM)


def tail(path: Path, n: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:])


# ---- the official determined client ------------------------------------------------------


def test_official_client_logs_in_and_lists_over_https(
    tls_master_factory: Any, tmp_path: Path
) -> None:
    """determined==0.38.1 with Determined's own DET_MASTER_CERT_FILE and DET_MASTER_CERT_NAME."""
    from tests.compat.official import ensure_official_venv

    official_bin = ensure_official_venv()
    cert = make_cert(tmp_path / "tls", "det-master", "DNS:det-master")
    m = tls_master_factory(cert, "det-master")
    http = tls.session(tls.load(str(cert.cert), "det-master"))
    token = http.post(
        m.url + "/api/v1/auth/login",
        json={"username": "admin", "password": ADMIN_PASSWORD},
        timeout=10,
    ).json()["token"]
    config = yaml.safe_dump(
        {
            "name": "tls-listed",
            "entrypoint": "python3 train.py",
            "searcher": {"name": "single", "metric": "x", "max_length": {"batches": 1}},
        }
    )
    r = http.post(
        m.url + "/api/v1/experiments",
        json={"config": config, "modelDefinition": [], "activate": False},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert r.ok, r.text
    home = tmp_path / "home"
    home.mkdir()

    def official(
        *args: str, stdin: str | None = None, trust: bool = True
    ) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": f"{official_bin}:{os.environ['PATH']}",
            "HOME": str(home),
            "DET_MASTER": m.url,
        }
        if trust:
            env |= {"DET_MASTER_CERT_FILE": str(cert.cert), "DET_MASTER_CERT_NAME": "det-master"}
        return subprocess.run(
            [str(official_bin / "det"), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )

    untrusted = official("user", "login", "admin", stdin=ADMIN_PASSWORD + "\n", trust=False)
    assert untrusted.returncode != 0
    assert "certificate" in (untrusted.stdout + untrusted.stderr).lower()
    login = official("user", "login", "admin", stdin=ADMIN_PASSWORD + "\n")
    assert login.returncode == 0, login.stderr
    listing = official("experiment", "list")
    assert listing.returncode == 0, listing.stderr
    assert "tls-listed" in listing.stdout
