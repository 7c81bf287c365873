"""The master's boot script, det's own release, the TLS material and the boot-time downloader."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import email
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import AWS, GCP

from det.deploy.aws import master as aws_master
from det.deploy.aws import program as aws_program
from det.deploy.common import boot, dryrun, release, tls, userdata
from det.deploy.common.errors import DeployError
from det.deploy.gcp import master as gcp_master
from det.master.provisioner import fetch_release, logship
from tests.fakes.local_http import TestHTTPServer

REL = release.Release(
    filename="det_platform-0.1.0-py3-none-any.whl",
    sha256="ab" * 32,
    constraints="x==1\n",
    path=None,
)
BOOT = boot.BootOptions(release=REL)


def _aws_user_data(cfg=AWS, log_group: str | None = "/det/c1") -> str:
    cfg = dataclasses.replace(cfg, boot=BOOT)
    return aws_master.user_data(cfg, "port: 8443\n", "arn:aws:secretsmanager:x", "bkt", log_group)


def _parts(user_data: str) -> dict[str, str]:
    msg = email.message_from_string(user_data)
    return {
        part.get_content_type(): part.get_payload()
        for part in msg.walk()
        if not part.is_multipart()
    }


def _inner_boot(script: str) -> str:
    return userdata.boot_script_of(script)


def test_aws_user_data_runs_at_every_boot_and_fits_the_limit():
    ud = _aws_user_data()
    assert len(ud.encode()) < 16 * 1024
    parts = _parts(ud)
    assert "- [scripts-user, always]" in parts["text/cloud-config"]
    script = parts["text/x-shellscript"]
    assert script.startswith("#!/bin/bash\n")
    assert "systemctl restart --no-block det-bootstrap.service" in script
    assert "Restart=on-failure" in script


def test_boot_scripts_are_valid_bash(tmp_path):
    gcp_cfg = dataclasses.replace(GCP, boot=BOOT)
    scripts = {
        "aws": _parts(_aws_user_data())["text/x-shellscript"],
        "gcp": gcp_master.startup_script(gcp_cfg, "port: 1\n", "projects/p/secrets/s", "b"),
    }
    for name, script in scripts.items():
        for n, text in enumerate((script, _inner_boot(script))):
            path = tmp_path / f"{name}{n}.sh"
            path.write_text(text)
            done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
            assert done.returncode == 0, (name, done.stderr)


def test_det_is_installed_only_from_its_hash_checked_wheel():
    inner = _inner_boot(_parts(_aws_user_data())["text/x-shellscript"])
    assert f"DET_WHEEL_SHA256={REL.sha256}" in inner
    assert "DET_WHEEL_URL=s3://bkt/det-release/det_platform-0.1.0-py3-none-any.whl" in inner
    assert "DET_CONSTRAINTS_URL=s3://bkt/det-release/constraints.txt" in inner
    installs = [line for line in inner.splitlines() if "pip install" in line]
    assert installs and all('"$WHEEL[$DET_EXTRAS]"' in line for line in installs)
    assert "det[" not in inner.replace("$WHEEL[", "")
    assert "apt-get -o DPkg::Lock::Timeout=600" in inner


def test_own_wheel_url_and_package_index_are_rendered():
    opts = boot.BootOptions(
        wheel_url="https://pkgs.example/det_platform-0.1.0-py3-none-any.whl",
        wheel_sha256="cd" * 32,
        package_index="https://pypi.example/simple",
    )
    assert opts.uploads is None
    cfg = dataclasses.replace(AWS, boot=opts)
    inner = _inner_boot(
        _parts(aws_master.user_data(cfg, "p: 1\n", "arn", "bkt", None))["text/x-shellscript"]
    )
    assert "DET_WHEEL_URL=https://pkgs.example/det_platform-0.1.0-py3-none-any.whl" in inner
    assert "DET_CONSTRAINTS_URL=''" in inner
    assert "DET_PACKAGE_INDEX=https://pypi.example/simple" in inner
    assert "det-logship" not in inner


def test_log_shipping_starts_first_with_the_system_python():
    # Before apt, the download and pip (det's venv does not exist yet): their failures are the
    # likeliest on a real first boot and must reach the log group.
    script = _parts(_aws_user_data(log_group="/det/c1"))["text/x-shellscript"]
    ship = "/usr/bin/python3 /usr/local/lib/det/logship.py --cloud aws --region us-west-2 --target /det/c1"
    assert ship in script
    assert script.index("systemctl restart det-logship") < script.index(
        "systemctl restart --no-block det-bootstrap.service"
    )
    assert "det-logship" not in _inner_boot(script)


# Passwords a user may choose: each breaks or changes an unquoted or badly quoted value.
HOSTILE = {
    # (systemd-analyze's condition cannot express a leading blank: none here, bash has one.)
    "DET_DB_PASSWORD": "tab\tand trailing blank ",
    "DET_SECURITY_INITIAL_USER_PASSWORD": "a b$HOME`id`\\\"x\\y'z#q;w=v\\",
    "DET_TASK_CONTAINER_DEFAULTS_REGISTRY_AUTH_PASSWORD": "#not a comment $(true) \\$x",
}


def _write_env(tmp_path: Path, values: dict[str, str]) -> Path:
    """Run the script's secret step for real: JSON in, 0600 env file and key out."""
    inner = _inner_boot(_parts(_aws_user_data())["text/x-shellscript"])
    step = inner[inner.index("printf '%s' \"$SECRET_JSON\"") : inner.index("unset SECRET_JSON")]
    step = (
        step.replace("/opt/det/bin/python3", sys.executable)
        .replace("/etc/det/master.env", str(tmp_path / "master.env"))
        .replace(tls.MASTER_CERT_PATH, str(tmp_path / "master.crt"))
        .replace(tls.MASTER_KEY_PATH, str(tmp_path / "master.key"))
    )
    material = tls.generate()
    secret = {
        "db_password": values["DET_DB_PASSWORD"],
        "initial_user_password": values["DET_SECURITY_INITIAL_USER_PASSWORD"],
        "registry_password": values["DET_TASK_CONTAINER_DEFAULTS_REGISTRY_AUTH_PASSWORD"],
        "tls_key": material.key_pem,
        "tls_cert": material.cert_pem,
    }
    env = {**os.environ, "SECRET_JSON": json.dumps(secret), "DET_TLS": "yes"}
    subprocess.run(["bash", "-c", step], cwd=tmp_path, check=True, env=env)
    assert (tmp_path / "master.key").read_text() == material.key_pem
    assert (tmp_path / "master.env").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "master.key").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "master.crt").read_text() == material.cert_pem
    return tmp_path / "master.env"


def test_secret_json_becomes_env_and_tls_files(tmp_path):
    """The env file read by bash (``set -a; . file``, as the boot simulations' systemctl
    stand-in does) gives back every hostile value unchanged and runs nothing."""
    values = {**HOSTILE, "DET_DB_PASSWORD": " leading blank"}
    path = _write_env(tmp_path, values)
    names = " ".join(values)
    read = subprocess.run(
        ["bash", "-c", f'set -a; . "$1"; for n in {names}; do printf "%s\\0" "${{!n}}"; done',
         "_", str(path)],
        capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]},
    )  # fmt: skip
    assert read.stdout.split("\0")[:-1] == list(values.values())
    assert read.stderr == ""


def _systemd_reads(env_file: Path, key: str, expected: str) -> bool:
    """Whether systemd's own environment-file parser reads ``key`` of ``env_file`` as
    ``expected``. The file stands in for /etc/os-release (a private mount namespace), which
    systemd parses with the lexer EnvironmentFile= uses; ``systemd-analyze condition``
    compares one of its values (the condition's argument is double-quoted itself)."""
    arg = expected.replace("\\", "\\\\").replace('"', '\\"')
    condition = f'ConditionOSRelease="{key}={arg}"'
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c",
         'mount --bind "$1" /etc/os-release && exec systemd-analyze condition "$2"',
         "_", str(env_file), condition],
        capture_output=True, text=True,
    )  # fmt: skip
    assert "ConditionOSRelease" in done.stdout + done.stderr, done.stderr
    return done.returncode == 0


def _can_run_systemd_parser(tmp_path: Path) -> bool:
    if not shutil.which("systemd-analyze") or not shutil.which("unshare"):
        return False
    probe = tmp_path / "probe"
    probe.write_text("ID=probe\n")
    try:
        return _systemd_reads(probe, "ID", "probe")
    except AssertionError:
        return False


def test_env_file_is_read_back_by_systemd(tmp_path):
    """systemd itself (the reader of ``EnvironmentFile=/etc/det/master.env``) gives back each
    hostile value unchanged; a changed value does not compare equal (the check is not blind)."""
    if not _can_run_systemd_parser(tmp_path):
        pytest.skip("needs systemd-analyze and unshare (user and mount namespaces)")
    # systemd-analyze compares with fnmatch: no * ? [ in these values.
    assert not any(c in v for v in HOSTILE.values() for c in "*?[")
    path = _write_env(tmp_path, HOSTILE)
    for key, value in HOSTILE.items():
        assert _systemd_reads(path, key, value), (key, path.read_text())
        assert not _systemd_reads(path, key, value + "x")


def test_graph_uploads_wheel_and_constraints_into_the_bucket():
    cfg = dataclasses.replace(AWS, boot=BOOT)
    graph = dryrun.render(lambda: aws_program.build(cfg), aws_program.MOCK_CALLS)
    objects = {
        r.inputs["key"]: r.inputs for r in graph.of_type("aws:s3/bucketObjectv2:BucketObjectv2")
    }
    assert set(objects) == {REL.wheel_key, REL.constraints_key}
    assert objects[REL.constraints_key]["content"] == "x==1\n"
    assert all(o["bucket"] == graph.outputs["bucket"] for o in objects.values())
    (instance,) = graph.of_type("aws:ec2/instance:Instance")
    assert REL.sha256 in userdata.boot_script_of(instance.inputs["userData"])


# -- the downloader ----------------------------------------------------------------------------


def test_sigv4_matches_botocore():
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    now = dt.datetime(2026, 11, 23, 12, 0, 0, tzinfo=dt.UTC)
    url = "https://bkt.s3.us-west-2.amazonaws.com/det-release/det_platform-0.1.0-py3-none-any.whl"
    ours = fetch_release.sigv4_headers(
        "GET",
        url,
        access_key="AKID",
        secret_key="SECRET",
        session_token="TOK",
        region="us-west-2",
        now=now,
    )
    request = AWSRequest(
        method="GET", url=url, headers={"x-amz-content-sha256": ours["x-amz-content-sha256"]}
    )
    signer = S3SigV4Auth(Credentials("AKID", "SECRET", "TOK"), "s3", "us-west-2")
    import unittest.mock

    with unittest.mock.patch("botocore.auth.get_current_datetime", return_value=now):
        signer.add_auth(request)
    assert ours["Authorization"] == request.headers["Authorization"]


class _Files(http.server.BaseHTTPRequestHandler):
    body = b"wheel bytes"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *a: object) -> None:
        pass


@pytest.fixture
def file_server():
    server = TestHTTPServer(("127.0.0.1", 0), _Files)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_fetch_checks_the_hash(tmp_path, file_server):
    good = hashlib.sha256(_Files.body).hexdigest()
    dest = tmp_path / "w.whl"
    assert fetch_release.main([f"{file_server}/w.whl", str(dest), good]) == 0
    assert dest.read_bytes() == _Files.body
    bad = tmp_path / "bad.whl"
    assert fetch_release.main([f"{file_server}/w.whl", str(bad), "0" * 64]) == 3
    assert not bad.exists() and not Path(f"{bad}.part").exists()


def test_fetch_refuses_unknown_schemes(tmp_path):
    assert fetch_release.main(["ftp://x/y", str(tmp_path / "y")]) == 3


# -- release, TLS and flags --------------------------------------------------------------------


def test_release_is_reproducible_and_pins_dependencies(tmp_path):
    release.build.cache_clear()
    first = release.build(tmp_path / "a")
    release.build.cache_clear()
    second = release.build(tmp_path / "b")
    assert first.sha256 == second.sha256
    assert first.filename.startswith("det_platform-") and first.filename.endswith(
        "-py3-none-any.whl"
    )
    assert first.path and hashlib.sha256(first.path.read_bytes()).hexdigest() == first.sha256
    pins = dict(line.split("==") for line in first.constraints.splitlines() if "==" in line)
    assert "det" not in pins and "det-platform" not in pins and "pyyaml" in pins and "boto3" in pins


def test_generated_certificate_names_det_master(tmp_path):
    from cryptography import x509

    made = tls.for_cluster(tmp_path, "aws", "c1")
    assert made.cert_file and not made.cert_file.exists()  # written only when up starts
    tls.save(made)
    key_file = made.cert_file.parent / "master.key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    again = tls.for_cluster(tmp_path, "aws", "c1")
    assert again.cert_pem == made.cert_pem and again.key_pem == made.key_pem
    cert = x509.load_pem_x509_certificate(made.cert_pem.encode())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "det-master" in names.get_values_for_type(x509.DNSName)
    loaded = tls.load(str(made.cert_file), str(key_file))
    assert loaded.cert_name == "det-master"


def test_mismatched_key_is_one_line_error(tmp_path):
    a, b = tls.generate(), tls.generate()
    (tmp_path / "c.pem").write_text(a.cert_pem)
    (tmp_path / "k.pem").write_text(b.key_pem)
    with pytest.raises(DeployError, match="does not match"):
        tls.load(str(tmp_path / "c.pem"), str(tmp_path / "k.pem"))
    with pytest.raises(DeployError, match="not a PEM certificate"):
        tls.load(str(tmp_path / "k.pem"), str(tmp_path / "k.pem"))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"det_wheel_url": "ftp://x/det.whl"}, "--det-wheel-url"),
        ({"det_wheel_url": "https://x/det.whl", "det_wheel_sha256": "xyz"}, "--det-wheel-sha256"),
        ({"master_tls_cert": "c.pem"}, "go together"),
    ],
)
def test_bad_boot_flags_are_refused(flags, message):
    args = argparse.Namespace(dry_run=True, **flags)
    with pytest.raises(DeployError, match=message):
        boot.from_args(args, "aws", "c1")


def test_client_exports_line():
    line = tls.client_exports("https://1.2.3.4:8443", Path("/h/master.crt"))
    assert line == (
        "export DET_MASTER=https://1.2.3.4:8443 DET_MASTER_CERT_FILE=/h/master.crt "
        "DET_MASTER_CERT_NAME=det-master"
    )


# -- the log shipper ---------------------------------------------------------------------------


def test_log_shipper_sends_complete_lines_once(tmp_path):
    log = tmp_path / "boot.log"
    log.write_text("one\ntwo\npart")
    sent: list[tuple[str, list[str]]] = []

    def send(name, events):
        sent.append((name, [line for _, line in events]))

    offsets: dict[str, int] = {}
    assert logship.ship_once([log], offsets, send) == 2
    assert logship.ship_once([log], offsets, send) == 0
    with log.open("a") as f:
        f.write("ial\n")
    assert logship.ship_once([log], offsets, send) == 1
    assert sent == [("boot.log", ["one", "two"]), ("boot.log", ["partial"])]
    log.write_text("new\n")  # truncated (rotated): start over
    assert logship.ship_once([log], offsets, send) == 1


def test_a_failed_master_boot_step_writes_one_line_to_the_serial_console(tmp_path):
    # The inner boot script's ERR trap, run for real on a step that fails as pip does after
    # its retries: one line on the console with the command and the step's own last words.
    inner = _inner_boot(_parts(_aws_user_data(log_group="/det/c1"))["text/x-shellscript"])
    start = inner.index("log() {")
    helpers = inner[start : inner.index("# apt waits", start)]
    boot_log = tmp_path / "boot.log"
    console = tmp_path / "console"
    script = (
        "set -euo pipefail\n"
        f"exec >>{boot_log} 2>&1\n"
        + helpers.replace("/var/log/det-bootstrap.log", str(boot_log))
        + "sleep() { :; }\n"
        + "pip_step() { echo 'ERROR: No matching distribution found for boto3'; return 1; }\n"
        + "retry pip_step install det\n"
        + "echo not reached\n"
    )
    result = subprocess.run(
        ["bash", "-c", script], env={**os.environ, "DET_CONSOLE": str(console)}, timeout=60
    )
    assert result.returncode == 1
    (line,) = console.read_text().splitlines()
    assert line.startswith("det-bootstrap FAILED (exit 1) at line ")
    assert ": pip_step install det -- ERROR: No matching distribution found for boto3" in line
    assert "not reached" not in boot_log.read_text()
