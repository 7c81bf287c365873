"""The AWS master's first boot, for real: the user data the Pulumi program renders (under its
mocks, never a copy) runs in a container of a fresh Debian VM image (``det-vm:trixie``: python3,
venv, curl; no det, no SDK) against moto (S3, Secrets Manager, CloudWatch Logs) and a fake IMDSv2
with role credentials. The container downloads det's wheel from the (fake) bucket with the
instance role, checks its hash, installs its dependencies from a local package index only
(``--det-package-index``; that index also offers a poisoned ``det`` 99.0 that must never be
picked), writes master.yaml and the secrets, and starts the master, which answers ``/info``.

The containers have no systemd: a ``systemctl`` stand-in (test only) runs a unit's ExecStart.
"""

from __future__ import annotations

import email
import hashlib
import http.server
import io
import json
import os
import subprocess
import threading
import time
import urllib.parse
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from det.deploy.aws import program
from det.deploy.aws.config import AwsConfig
from det.deploy.common import boot, dryrun, release, tls
from tests.fakes.imds import FakeImds
from tests.fakes.moto_server import MotoServer, free_port

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

VM_IMAGE = "det-vm:trixie"
REGION = "us-east-1"
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"

SYSTEMCTL_SHIM = r"""#!/bin/bash
# Test-only stand-in for systemd: runs a unit's ExecStart in the background (no restarts).
cmd=$1; shift
[ "${1:-}" = --no-block ] && shift
case $cmd in
  daemon-reload|enable) exit 0 ;;
  start|restart)
    unit=${1%.service}
    f=/etc/systemd/system/$unit.service
    exec_start=$(sed -n 's/^ExecStart=//p' "$f")
    envfile=$(sed -n 's/^EnvironmentFile=//p' "$f")
    out=$(sed -n 's/^StandardOutput=append://p' "$f")
    if [ -f "/run/shim-$unit.pid" ]; then kill "$(cat "/run/shim-$unit.pid")" 2>/dev/null || true; fi
    (
      if [ -n "$envfile" ]; then set -a; . "$envfile"; set +a; fi
      exec setsid $exec_start >>"${out:-/var/log/shim-$unit.log}" 2>&1
    ) &
    echo $! >"/run/shim-$unit.pid"
    ;;
  *) echo "systemctl shim: $cmd not supported" >&2; exit 1 ;;
esac
"""


def _docker_ok() -> bool:
    try:
        done = subprocess.run(
            ["docker", "image", "inspect", VM_IMAGE], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


needs_vm = pytest.mark.skipif(
    not _docker_ok(), reason=f"needs Docker and {VM_IMAGE} (infra/build-images.sh vm)"
)


# -- a local package index ---------------------------------------------------------------------


def _wheelhouse(rel: release.Release) -> Path:
    """det's dependencies for the VM's Python, downloaded once (by the VM image's own pip, so
    markers and tags are the VM's) and cached by the constraints' hash."""
    assert rel.path is not None
    key = hashlib.sha256(rel.constraints.encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "det-tests"
    out = cache / f"vm-wheelhouse-{key}"
    if (out / ".complete").exists():
        return out
    work = cache / f"vm-wheelhouse-{key}.tmp"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    (work / "constraints.txt").write_text(rel.constraints)
    (work / rel.filename).write_bytes(rel.path.read_bytes())
    script = (
        "python3 -m venv /v && /v/bin/pip download -q --only-binary=:all: --dest /w/wheels "
        f"--constraint /w/constraints.txt '/w/{rel.filename}[master,aws]'"
    )
    subprocess.run(
        ["docker", "run", "--rm", "--network", "host", "-v", f"{HOST_CA}:{HOST_CA}:ro",
         "-e", f"PIP_CERT={HOST_CA}", "-e", "PIP_DISABLE_PIP_VERSION_CHECK=1",
         "-v", f"{work}:/w", VM_IMAGE, "bash", "-c", script],
        check=True, timeout=600,
    )  # fmt: skip
    for wheel in (work / "wheels").glob("det-*.whl"):
        wheel.unlink()
    subprocess.run(["rm", "-rf", str(out)], check=True)
    (work / "wheels").rename(out)
    subprocess.run(["rm", "-rf", str(work)], check=True)
    (out / ".complete").touch()
    return out


def _poisoned_det() -> bytes:
    """A ``det`` 99.0.0 wheel: what a public index would hand out for the bare name."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("det_poison.py", "")
        zf.writestr(
            "det-99.0.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: det\nVersion: 99.0.0\n"
        )
        zf.writestr(
            "det-99.0.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        zf.writestr("det-99.0.0.dist-info/RECORD", "")
    return buf.getvalue()


class _Index:
    def __init__(self, root: Path) -> None:
        self.requests: list[str] = []
        index = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a: Any, **kw: Any) -> None:
                super().__init__(*a, directory=str(root), **kw)

            def log_message(self, *a: Any) -> None:
                index.requests.append(self.path)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _simple_index(wheelhouse: Path, root: Path) -> None:
    for wheel in wheelhouse.glob("*.whl"):
        project = wheel.name.split("-")[0].lower().replace("_", "-").replace(".", "-")
        (root / "simple" / project).mkdir(parents=True, exist_ok=True)
        (root / "simple" / project / wheel.name).symlink_to(wheel)
    (root / "simple" / "det").mkdir(parents=True)
    (root / "simple" / "det" / "det-99.0.0-py3-none-any.whl").write_bytes(_poisoned_det())


# -- the boot ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = MotoServer()
    server.start()
    yield server
    server.stop()


def _boto(service: str, endpoint: str) -> Any:
    import boto3

    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def _socket_dir(pg_url: str) -> str:
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(pg_url).query)
    return query["host"][0]


@needs_vm
@pytest.mark.parametrize("use_tls", [True, False], ids=["https", "plain-http"])
def test_master_boots_from_the_bucket_and_answers(
    use_tls: bool, moto: MotoServer, pg_server: str, tmp_path: Path
) -> None:
    import psycopg

    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS determined WITH (FORCE)")
        conn.execute("CREATE DATABASE determined")
    moto.reset()
    endpoint = moto.endpoint
    rel = release.build()
    material = tls.generate()
    (tmp_path / "master.crt").write_text(material.cert_pem)
    root = tmp_path / "index"
    _simple_index(_wheelhouse(rel), root)
    index = _Index(root)
    port = free_port()
    secret_doc = {
        "db_password": "pw",
        "initial_user_password": "Boot-Sim-Passw0rd!",
        "tls_key": material.key_pem,
        "tls_cert": material.cert_pem,
    }
    secret_arn = _boto("secretsmanager", endpoint).create_secret(
        Name="det-c1-secret", SecretString=json.dumps(secret_doc)
    )["ARN"]
    _boto("logs", endpoint).create_log_group(logGroupName="/det/c1")
    cfg = AwsConfig(
        cluster_id="c1",
        region=REGION,
        keypair="kp",
        port=port,
        tls=use_tls,
        boot=boot.BootOptions(release=rel, package_index=index.url, tls=material),
    )
    graph = dryrun.render(
        lambda: program.build(cfg),
        program.MOCK_CALLS,
        overrides={
            "aws:rds/instance:Instance": {"address": _socket_dir(pg_server), "port": 5432},
            "aws:secretsmanager/secret:Secret": {"arn": secret_arn},
        },
    )
    s3 = _boto("s3", endpoint)
    s3.create_bucket(Bucket=graph.outputs["bucket"])
    for obj in graph.of_type("aws:s3/bucketObjectv2:BucketObjectv2"):
        body = (
            Path(obj.inputs["source"].path).read_bytes()
            if "source" in obj.inputs
            else obj.inputs["content"].encode()
        )
        s3.put_object(Bucket=obj.inputs["bucket"], Key=obj.inputs["key"], Body=body)
    (instance,) = graph.of_type("aws:ec2/instance:Instance")
    message = email.message_from_string(instance.inputs["userData"])
    (script,) = [
        p.get_payload() for p in message.walk() if p.get_content_type() == "text/x-shellscript"
    ]
    (tmp_path / "user-data.sh").write_text(script)
    shim = tmp_path / "systemctl"
    shim.write_text(SYSTEMCTL_SHIM)
    shim.chmod(0o755)

    imds = FakeImds().start()
    expiry = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    imds.metadata.update(
        {
            "local-ipv4": "127.0.0.1",
            "placement/region": REGION,
            "iam/security-credentials/": "det-c1-master",
            "iam/security-credentials/det-c1-master": json.dumps(
                {
                    "Code": "Success",
                    "AccessKeyId": "ASIAROLE",
                    "SecretAccessKey": "role-secret",
                    "Token": "role-token",
                    "Expiration": expiry,
                }
            ),
        }
    )
    name = f"det-boot-{uuid.uuid4().hex[:8]}"
    socket_dir = _socket_dir(pg_server)
    try:
        subprocess.run(
            ["docker", "run", "-d", "--name", name, "--network", "host",
             "-v", f"{tmp_path}:/boot:ro", "-v", f"{shim}:/usr/local/bin/systemctl:ro",
             "-v", f"{socket_dir}:{socket_dir}",
             "-e", f"AWS_ENDPOINT_URL={endpoint}", "-e", f"DET_IMDS_URL={imds.url}",
             "-e", f"AWS_EC2_METADATA_SERVICE_ENDPOINT={imds.url}/",
             VM_IMAGE, "bash", "-c", "bash /boot/user-data.sh && exec sleep infinity"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        scheme = "https" if use_tls else "http"
        get: Any = (
            tls.verified_get(tmp_path / "master.crt", tls.CERT_NAME) if use_tls else requests.get
        )
        info = _wait_for_info(get, f"{scheme}://127.0.0.1:{port}", name)
        assert info["version"]

        def sh(cmd: str) -> str:
            return subprocess.run(
                ["docker", "exec", name, "bash", "-c", cmd],
                capture_output=True,
                text=True,
                check=True,
            ).stdout

        assert (
            sh(
                "/opt/det/bin/python3 -c 'import importlib.metadata as m; print(m.version(\"det\"))'"
            ).strip()
            == "0.1.0"
        )
        assert sh("cat /opt/det/.det-wheel-sha256").startswith(rel.sha256 + ":s3://")
        # Dependencies came from the local index; det's name was never looked up there.
        assert any(p.startswith("/simple/boto3/") for p in index.requests)
        assert not any(p.startswith("/simple/det/") for p in index.requests)
        assert sh("stat -c %a /etc/det/master.env").strip() == "600"
        if use_tls:
            assert sh(f"stat -c %a {tls.MASTER_KEY_PATH}").strip() == "600"
        boot_log = sh("cat /var/log/det-bootstrap.log")
        assert f"installed {rel.filename}" in boot_log and "det-master (re)started" in boot_log
    finally:
        logs = subprocess.run(["docker", "exec", name, "bash", "-c", "tail -n 60 /var/log/det-bootstrap.log /var/log/det-master.log"], capture_output=True, text=True)  # fmt: skip
        print(logs.stdout, logs.stderr)
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
        imds.stop()
        index.close()


def _wait_for_info(get: Any, url: str, container: str, timeout: float = 240.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            response = get(f"{url}/info", timeout=5)
            if response.status_code == 200:
                info: dict[str, Any] = response.json()
                return info
            last = f"HTTP {response.status_code}"
        except requests.RequestException as e:
            last = type(e).__name__
        state = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Running}}", container],
            capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        if state != "true":
            break
        time.sleep(2)
    raise AssertionError(f"the master at {url} did not answer /info ({last})")
