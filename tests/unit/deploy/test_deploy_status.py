"""`det deploy aws|gcp status`: outputs from the local state, the master's health over HTTPS with
the saved certificate, and the boot log's tail (AWS: moto's CloudWatch Logs in server mode; GCP:
a small fake of Cloud Logging's entries:list and of the OAuth2 token endpoint a service account
key file names)."""

from __future__ import annotations

import http.server
import io
import json
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from det.deploy import clouds
from det.deploy.aws import iam
from det.deploy.common import automation, dryrun, state, tls
from det.deploy.common.errors import DeployError
from det.deploy.gcp import bootlog
from det.master.provisioner import logship
from tests.fakes.google_apis import list_entries
from tests.fakes.local_http import LocalHttpFake, TestHTTPServer
from tests.fakes.moto_server import REGION, MotoServer

SECRET = {dryrun.SECRET_SIG_KEY: "1b47061264138c4ac30d75fd1eb44270", "ciphertext": "x"}


def _write_stack(project: str, cluster_id: str, outputs: dict[str, Any]) -> None:
    stacks = state.state_dir() / ".pulumi" / "stacks" / project
    stacks.mkdir(parents=True, exist_ok=True)
    doc = {
        "checkpoint": {
            "latest": {"resources": [{"type": "pulumi:pulumi:Stack", "outputs": outputs}]}
        }
    }
    (stacks / f"{cluster_id}.json").write_text(json.dumps(doc))


class _Info(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"clusterName": "c1", "version": "0.1.0"}).encode()
        self.send_response(200 if self.path == "/info" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def https_master(tmp_path: Path) -> Iterator[tuple[str, tls.TlsMaterial]]:
    material = tls.generate()
    (tmp_path / "c.pem").write_text(material.cert_pem)
    (tmp_path / "k.pem").write_text(material.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
    server = TestHTTPServer(("127.0.0.1", 0), _Info)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}", material
    server.shutdown()
    server.server_close()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(state.STATE_URL_ENV, raising=False)
    return tmp_path


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = clouds.run(argv, out, err)
    return code, out.getvalue(), err.getvalue()


def _save_cert(cloud: str, material: tls.TlsMaterial) -> None:
    tls.save(
        tls.TlsMaterial(
            material.cert_pem,
            material.key_pem,
            tls.cluster_dir(state.state_dir(), cloud, "c1") / "master.crt",
        )
    )


class AwsCalls:
    """Every AWS API call botocore makes, as IAM actions (``logs:GetLogEvents``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import botocore.client

        self.actions: set[str] = set()
        self.recording = False
        original = botocore.client.BaseClient._make_api_call

        def record(client: Any, operation: str, params: Any) -> Any:
            if self.recording:
                self.actions.add(f"{client.meta.service_model.signing_name}:{operation}")
            return original(client, operation, params)

        monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", record)


# sts:GetCallerIdentity needs no permission (it is never denied).
NO_PERMISSION_NEEDED = {"sts:GetCallerIdentity"}


def _put(logs: Any, stream: str, start_ms: int, lines: list[str]) -> None:
    logs.create_log_stream(logGroupName="/det/c1", logStreamName=stream)
    logs.put_log_events(
        logGroupName="/det/c1",
        logStreamName=stream,
        logEvents=[{"timestamp": start_ms + i, "message": m} for i, m in enumerate(lines)],
    )


@pytest.mark.integration
def test_aws_status_shows_each_machines_own_tail_beside_a_busy_master(
    aws_moto: MotoServer,
    home: Path,
    https_master: tuple[str, tls.TlsMaterial],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = AwsCalls(monkeypatch)
    url, material = https_master
    _save_cert("aws", material)
    _write_stack(
        "det-aws",
        "c1",
        {
            "master_url": url,
            "region": REGION,
            "bucket": "det-c1-checkpoints",
            "log_group": "/det/c1",
            "master_instance_id": "i-0master",
            "initial_user_password": SECRET,
        },
    )
    logs = boto3.client("logs", region_name=REGION)
    agent = _launch(REGION)
    now = int(time.time() * 1000) - 600_000  # CloudWatch drops events older than 14 days
    logs.create_log_group(logGroupName="/det/c1")
    _put(logs, "i-0old/det-bootstrap.log", now, ["an agent of an hour ago"])
    master_boot = ["installing det", "installed det", "det-master (re)started"]
    _put(logs, "i-0master/det-bootstrap.log", now + 1000, master_boot)
    boot = ["fetching the wheel", f"det-bootstrap: agent id: {agent}"]
    _put(logs, f"{agent}/det-bootstrap.log", now + 2000, boot)
    _put(logs, f"{agent}/det-agent.log", now + 3000, ["registered", "a trial started"])
    # The master writes last and most: before, its lines were all a merged tail showed.
    _put(logs, "i-0master/det-master.log", now + 4000, [f"request {i}" for i in range(300)])
    calls.recording = True
    code, out, err = _run(["aws", "status", "--cluster-id", "c1", "--lines", "2", "--agents", "1"])
    json_code, as_json, _ = _run(["aws", "status", "--cluster-id", "c1", "--json"])
    assert code == 0, err
    # The deploying user's documented grant covers exactly what status called.
    assert calls.actions - NO_PERMISSION_NEEDED == set(iam.STATUS_READ_ACTIONS)
    assert f"master_url: {url}" in out and "bucket: det-c1-checkpoints" in out
    assert "is up: cluster c1, version 0.1.0" in out
    assert "CloudWatch Logs group /det/c1" in out
    tail = out.split("the last 2 lines of each file:\n", 1)[1]
    sections = [line.strip() for line in tail.splitlines() if not line.startswith("    ")]
    # The master first (boot log, then its service's), then the agent that wrote last.
    assert sections == [
        "master i-0master, det-bootstrap.log:",
        "master i-0master, det-master.log:",
        f"agent {agent}, det-bootstrap.log:",
        f"agent {agent}, det-agent.log:",
    ]
    assert tail.count("det-master (re)started") == 1 and "installing det" not in tail
    assert "request 298" in tail and "request 299" in tail and "request 297" not in tail
    assert f"det-bootstrap: agent id: {agent}" in tail and "a trial started" in tail
    assert "an agent of an hour ago" not in tail  # --agents 1
    assert "initial_user_password" not in out
    assert json_code == 0
    doc = json.loads(as_json)["bootLog"]
    assert [(m["machine"], m["role"]) for m in doc["machines"]] == [
        ("i-0master", "master"),
        (agent, "agent"),
        ("i-0old", "agent"),
    ]
    assert len(doc["machines"][0]["files"]["det-master.log"]) == 50  # the default --lines
    assert any(
        line.endswith(f"[{agent}/det-bootstrap.log] det-bootstrap: agent id: {agent}")
        for line in doc["lines"]
    )


def _launch(region: str, cluster: str = "c1") -> str:
    """An instance of the cluster in moto (an agent as EC2 lists it)."""
    ec2 = boto3.client("ec2", region_name=region)
    tags = [{"Key": "det-cluster", "Value": cluster}]
    (instance,) = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )["Instances"]
    return str(instance["InstanceId"])


@pytest.mark.integration
def test_aws_tail_finds_a_quiet_master_and_a_booting_agent(
    aws_moto: MotoServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from det.deploy.aws import bootlog as aws_bootlog

    # The newest streams are read in a page of 50 ordered by a time that CloudWatch updates
    # late; a page of 2 stands for 50 busy (or stale) streams.
    monkeypatch.setattr(aws_bootlog, "_NEWEST", 2)
    logs = boto3.client("logs", region_name=REGION)
    booting = _launch(REGION)
    _launch(REGION, "another-cluster")
    now = int(time.time() * 1000) - 600_000
    logs.create_log_group(logGroupName="/det/c1")
    _put(logs, "i-0master/det-bootstrap.log", now, ["det-master (re)started"])
    _put(logs, f"{booting}/det-bootstrap.log", now + 500, ["installing det"])
    for n in range(3):
        _put(logs, f"i-0a{n}/det-bootstrap.log", now + 1000 * (n + 1), [f"agent {n}"])
    machines = aws_bootlog.tail(
        logs,
        "/det/c1",
        10,
        master="i-0master",
        agents=3,
        ec2=boto3.client("ec2", region_name=REGION),
        cluster_id="c1",
    )
    assert [(m.machine, m.role) for m in machines] == [
        ("i-0master", "master"),
        (booting, "agent"),  # runs now: EC2 says so, whatever the streams' order
        ("i-0a2", "agent"),
        ("i-0a1", "agent"),
    ]
    assert machines[0].lines("det-bootstrap.log")[0].endswith("Z det-master (re)started")


def test_status_refuses_lines_out_of_range_in_one_line(home: Path) -> None:
    code, _, err = _run(["aws", "status", "--cluster-id", "c1", "--lines", "0"])
    assert code != 0 and "--lines must be between 1 and 10000 (got 0)" in err
    assert "Traceback" not in err


@pytest.mark.integration
def test_machines_log_shipper_calls_only_what_their_roles_grant(
    aws_moto: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The shipper is standard library only (SigV4 by hand): its requests are recorded at its
    # one HTTP call and must reach moto, signed well enough, as the events read back show.
    actions: set[str] = set()
    post = logship._post

    def recording_post(url: str, body: bytes, headers: dict[str, str]) -> Any:
        actions.add("logs:" + headers["x-amz-target"].split(".", 1)[1])
        return post(url, body, headers)

    monkeypatch.setattr(logship, "_post", recording_post)
    client = boto3.client("logs", region_name=REGION)
    client.create_log_group(logGroupName="/det/c1")
    send = logship.aws_sender(REGION, "/det/c1", "i-0master")
    send("det-bootstrap.log", [(int(time.time() * 1000), "a line")])
    send("det-bootstrap.log", [(int(time.time() * 1000), "another")])
    events = client.get_log_events(
        logGroupName="/det/c1", logStreamName="i-0master/det-bootstrap.log"
    )["events"]
    assert [e["message"] for e in events] == ["a line", "another"]
    assert actions == set(iam.LOG_WRITE_ACTIONS)
    (statement,) = iam.log_statements("arn:aws:logs:r:1:log-group:/det/c1")
    assert set(statement["Action"]) == set(iam.LOG_WRITE_ACTIONS)


def _documented_policy(heading: str) -> dict[str, Any]:
    """The first JSON block after ``heading`` in docs/deploy.md."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "deploy.md").read_text()
    rest = doc[doc.index(heading) :]
    start = rest.index("```json\n") + len("```json\n")
    return dict(json.loads(rest[start : rest.index("```", start)]))


def test_documented_status_policy_is_the_one_status_needs() -> None:
    documented = _documented_policy("### Reading boot logs")
    arn = iam.log_group_arn("REGION", "/det/CLUSTER_ID").replace(":*:", ":ACCOUNT:")
    assert documented == iam.status_reader_policy(arn)


def test_status_of_an_unknown_cluster_is_one_line(home: Path) -> None:
    code, _, err = _run(["aws", "status", "--cluster-id", "nope"])
    assert code == 1 and "no cluster 'nope'" in err and "Traceback" not in err


def test_health_with_another_certificate_says_so(
    home: Path, https_master: tuple[str, tls.TlsMaterial], tmp_path: Path
) -> None:
    url, _ = https_master
    other = tmp_path / "other.crt"
    other.write_text(tls.generate().cert_pem)
    from det.deploy.common import status

    healthy, line = status.master_health(url, other, tls.CERT_NAME)
    assert not healthy and "does not present the cluster's certificate" in line
    healthy, line = status.master_health(url, tmp_path / "missing.crt", tls.CERT_NAME)
    assert not healthy and "--master-cert-file" in line


def test_up_timeout_names_the_status_command() -> None:
    with pytest.raises(DeployError, match=r"`det deploy aws status --cluster-id c1` shows"):
        automation.wait_for_master(
            "http://127.0.0.1:9",
            0,
            sleep=lambda s: None,
            status_command="det deploy aws status --cluster-id c1",
        )


# --- GCP -----------------------------------------------------------------------------------------


class FakeLogging(LocalHttpFake):
    """Cloud Logging's ``POST /v2/entries:list``: the entries that match the filter, newest
    first, ``pageSize`` of them (``google_apis.list_entries``); a bearer token is required."""

    def __init__(self, token: str, entries: list[dict[str, Any]]) -> None:
        self.token, self.entries = token, entries
        self.requests: list[dict[str, Any]] = []

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path == "/token":  # OAuth2: the signed JWT traded for a token
                    self._send(200, {"access_token": fake.token, "expires_in": 3600})
                    return
                doc = json.loads(raw)
                fake.requests.append(doc)
                if self.headers.get("Authorization") != f"Bearer {fake.token}":
                    self._send(401, {"error": {"code": 401}})
                    return
                self._send(200, {"entries": list_entries(fake.entries, doc)})

            def _send(self, status: int, doc: dict[str, Any]) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def _service_account_key(token_uri: str) -> dict[str, str]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return {
        "type": "service_account",
        "project_id": "proj",
        "private_key_id": "k1",
        "private_key": pem,
        "client_email": "deployer@proj.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": token_uri,
    }


def _entry(ts: str, instance: str, text: str, file: str = "det-bootstrap.log") -> dict[str, Any]:
    return {
        "logName": "projects/proj/logs/det-boot",
        "timestamp": ts,
        "labels": {"instance": instance, "file": file},
        "textPayload": text,
    }


def test_gcp_status_reads_cloud_logging_with_a_service_account_key(
    home: Path, https_master: tuple[str, tls.TlsMaterial], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, material = https_master
    _save_cert("gcp", material)
    _write_stack(
        "det-gcp",
        "c1",
        {
            "master_url": url,
            "project_id": "proj",
            "boot_log_name": "det-boot",
            "zone": "us-west1-b",
        },
    )
    entries = [
        _entry("2026-01-01T09:00:00.000Z", "det-agent-c1-old1", "an agent of an hour ago"),
        _entry("2026-01-01T10:00:00.000Z", "det-master-c1", "installing det"),
        _entry("2026-01-01T10:01:00.000Z", "det-master-c1", "det-master (re)started"),
        _entry("2026-01-01T10:02:00.000Z", "det-agent-c1-0001", "fetching the wheel"),
        _entry("2026-01-01T10:02:30.000Z", "det-agent-c1-0001", "agent id: det-agent-c1-0001"),
        _entry("2026-01-01T10:03:00.000Z", "det-agent-c1-0001", "registered", "det-agent.log"),
        # Another cluster whose name starts like this one's: never shown.
        _entry("2026-01-01T10:04:00.000Z", "det-master-c10", "not ours"),
    ]
    # The master writes last and most (before, a merged tail of 2 showed only these).
    entries += [
        _entry(f"2026-01-01T11:{i // 60:02d}:{i % 60:02d}.000Z", "det-master-c1", f"request {i}",
               "det-master.log")
        for i in range(300)
    ]  # fmt: skip
    with FakeLogging("tok-1", entries) as logging_api:
        # A service account key file (`--keypath`), its token endpoint the fake's: google-auth
        # signs a JWT with the key and trades it there for an access token.
        creds = home / "key.json"
        creds.write_text(json.dumps(_service_account_key(f"{logging_api.url}/token")))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(creds))
        monkeypatch.setenv("DET_LOGGING_ENDPOINT", logging_api.url)
        code, out, err = _run(
            ["gcp", "status", "--cluster-id", "c1", "--lines", "2", "--agents", "1"]
        )
    assert code == 0, err
    assert "is up: cluster c1" in out and "Cloud Logging log det-boot in proj" in out
    tail = out.split("the last 2 lines of each file:\n", 1)[1]
    assert tail.splitlines() == [
        "  master det-master-c1, det-bootstrap.log:",
        "    2026-01-01T10:00:00Z installing det",
        "    2026-01-01T10:01:00Z det-master (re)started",
        "  master det-master-c1, det-master.log:",
        "    2026-01-01T11:04:58Z request 298",
        "    2026-01-01T11:04:59Z request 299",
        "  agent det-agent-c1-0001, det-bootstrap.log:",
        "    2026-01-01T10:02:00Z fetching the wheel",
        "    2026-01-01T10:02:30Z agent id: det-agent-c1-0001",
        "  agent det-agent-c1-0001, det-agent.log:",
        "    2026-01-01T10:03:00Z registered",
    ]
    assert all(r["resourceNames"] == ["projects/proj"] for r in logging_api.requests)
    # One request finds the agents, then one per file of the master and of the agent shown.
    assert len(logging_api.requests) == 5


def test_gcp_log_refusal_is_one_line() -> None:
    import requests

    with FakeLogging("right", []) as logging_api:
        session = requests.Session()
        session.headers["Authorization"] = "Bearer wrong"
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("DET_LOGGING_ENDPOINT", logging_api.url)
            with pytest.raises(DeployError, match="Cloud Logging answered HTTP 401"):
                bootlog.tail(session.post, "proj", "det-boot", "c1", 10)
