"""No request the master makes for a non-admin reaches the master host's own services or
private networks (issue 36, findings 3, 4 and 6): a webhook, an experiment's S3
``endpoint_url`` and a checkpoint download aimed at each refused class of address (loopback,
a name that resolves to it, link-local/metadata, private, CGNAT, unique local, TEST-NETs,
benchmarking, multicast, reserved, unspecified, IPv4 inside IPv6 forms, and this machine's own
non-loopback interface addresses) are refused, and nothing arrives at a receiver listening
there; the webhook test route answers the status, never the body, nor do stored deliveries
keep it; a JSON ``true`` where an integer id goes is a 400.

One master (its app and its control loop, which delivers webhooks, in the test's process:
tests/integration/inproc.py) over a real PostgreSQL, with moto (server mode) as the
cluster's S3 storage and ``egress.allowed_hosts: [127.0.0.2]`` (an admin's allowance). Rows
the API now refuses to make (a non-admin's webhook to loopback, an experiment whose storage
points at it: made before this policy, or by a name that resolved elsewhere when checked) are
written with SQL, so the checks at send and download time are what is tested there."""

from __future__ import annotations

import base64
import http.server
import ipaddress
import json
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import psycopg
import pytest
import requests

from tests.conftest import new_database
from tests.fakes.local_http import TestHTTPServer
from tests.fakes.moto_server import MotoServer
from tests.integration.inproc import InProcessMaster, control_loop, in_process_master, routed

pytestmark = pytest.mark.integration

SECRET = "internal-service-secret-4711"
BUCKET = "cluster-ckpts"
CONFIG = """
name: egress
entrypoint: python3 train.py
searcher: {name: single, metric: loss}
hyperparameters: {lr: 0.1}
"""


def _own_addresses() -> list[str]:
    """This machine's non-loopback interface addresses, as ``ip`` lists them."""
    run = subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True, check=True)
    out = []
    for link in json.loads(run.stdout):
        for info in link.get("addr_info", []):
            addr = ipaddress.ip_address(info["local"])
            if not addr.is_loopback:
                out.append(str(addr))
    return out


def _url_host(addr: str) -> str:
    return f"[{addr}]" if ":" in addr else addr


# Hosts for each refused class (URLs add a port); "localhost" is a name that resolves to one.
REFUSED_HOSTS = [
    "127.0.0.1", "localhost", "[::1]", "0.0.0.0", "169.254.169.254", "10.0.0.1",
    "172.16.0.1", "192.168.0.1", "100.64.0.1", "[fd00:ec2::254]", "[fc00::1]", "[fe80::1]",
    "192.0.2.1", "198.51.100.1", "203.0.113.1", "198.18.0.1", "224.0.0.1", "240.0.0.1",
    "[::ffff:127.0.0.1]", "[::ffff:169.254.169.254]", "[64:ff9b::a9fe:a9fe]", "[2002:7f00:1::]",
]  # fmt: skip


def _refused_hosts() -> list[str]:
    return REFUSED_HOSTS + [_url_host(a) for a in _own_addresses()]


class Receiver:
    """An HTTP server that records each request and answers ``status`` with a secret body."""

    def __init__(self, status: int = 200, host: str = "127.0.0.1") -> None:
        self.requests: list[str] = []
        self.status = status
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests.append(f"{self.command} {self.path}")
                body = SECRET.encode()
                self.send_response(outer.status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_HEAD = do_PUT = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = TestHTTPServer((host, 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class World:
    m: InProcessMaster
    db: str
    moto: str
    alice: requests.Session
    workspace: int


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
    pg_server: str,
    pg_template: str,
    moto_server: MotoServer,
) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("egress")
    moto_server.reset()  # the test process's (conftest_aws)
    with new_database(pg_server, "det_egress", template=pg_template) as db:
        _s3(moto_server.endpoint).create_bucket(Bucket=BUCKET)
        storage = {"type": "s3", "bucket": BUCKET, "endpoint_url": moto_server.endpoint,
                   "access_key": "testing", "secret_key": "testing"}  # fmt: skip
        extra = {
            "checkpoint_storage": storage,
            "egress": {"allowed_hosts": ["127.0.0.2"]},
            "webhooks": {"signing_key": "egress-test-key"},
        }
        # The master's app and control loop (which delivers webhooks) in this process.
        with in_process_master(tmp, db, extra) as m, routed(m), control_loop(m):
            m.post("/api/v1/users", {"user": {"username": "alice", "admin": False},
                                     "password": "Alice-pw-1"})  # fmt: skip
            alice = m.session(m.login("alice", "Alice-pw-1"))
            ws = alice.post(m.url + "/api/v1/workspaces", json={"name": "alices"}, timeout=30)
            assert ws.status_code == 200, ws.text
            yield World(m, db, moto_server.endpoint, alice, int(ws.json()["workspace"]["id"]))


def _s3(endpoint: str) -> Any:
    return boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id="testing", aws_secret_access_key="testing",
    )  # fmt: skip


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _hook(url: str, workspace: int) -> dict[str, Any]:
    return {
        "name": f"h-{uuid.uuid4().hex[:6]}", "url": url, "webhookType": "WEBHOOK_TYPE_DEFAULT",
        "workspaceId": workspace,
        "triggers": [{"triggerType": "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE",
                      "condition": {"state": "COMPLETED"}}],
    }  # fmt: skip


# -- webhooks -----------------------------------------------------------------------------------
def test_a_non_admins_webhook_to_each_refused_class_is_refused(world: World) -> None:
    allowed = []
    for host in _refused_hosts():
        r = world.alice.post(
            world.m.url + "/api/v1/webhooks", json=_hook(f"http://{host}:8080/h", world.workspace),
            timeout=30,
        )  # fmt: skip
        if r.status_code != 400 or not r.json()["message"].startswith("url: host "):
            allowed.append((host, r.status_code, r.text[:200]))
    assert not allowed, allowed
    # An address the admin allowed, and a public one, may be used.
    for url in ("http://127.0.0.2:9/h", "http://8.8.8.8:9/h"):
        r = world.alice.post(
            world.m.url + "/api/v1/webhooks", json=_hook(url, world.workspace), timeout=30
        )
        assert r.status_code == 200, (url, r.text)


def _insert_hook(world: World, url: str, by: str) -> int:
    """A webhook row made by ``by`` (written as if made before the policy: the API refuses it)."""
    with psycopg.connect(world.db, autocommit=True) as c:
        row = c.execute(
            "INSERT INTO webhooks (name, url, webhook_type, mode, workspace_id, created_by)"
            " SELECT %s, %s, 'DEFAULT', 'WORKSPACE', %s, id FROM users WHERE username = %s"
            " RETURNING id",
            (f"sql-{uuid.uuid4().hex[:6]}", url, world.workspace, by),
        ).fetchone()
        assert row is not None
        c.execute(
            "INSERT INTO webhook_triggers (webhook_id, trigger_type, condition)"
            " VALUES (%s, 'EXPERIMENT_STATE_CHANGE', '{\"state\": \"COMPLETED\"}')",
            (row[0],),
        )
        c.execute(
            "INSERT INTO webhook_events (webhook_id, url, webhook_type, payload)"
            " VALUES (%s, %s, 'DEFAULT', '{}')",
            (row[0], url),
        )
        c.execute("NOTIFY det_wakeup")
    return int(row[0])


def _events(world: World, hook: int) -> list[dict[str, Any]]:
    r = world.alice.get(f"{world.m.url}/api/v1/webhooks/{hook}/events", timeout=30)
    assert r.status_code == 200, r.text
    return list(r.json()["events"])


def _wait(pred: Any, seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_non_admins_webhook_is_judged_again_when_tested_and_delivered(
    world: World, receiver: Receiver
) -> None:
    for host in ("localhost", "127.0.0.1"):
        hook = _insert_hook(world, f"http://{host}:{receiver.port}/h", "alice")
        r = world.alice.post(f"{world.m.url}/api/v1/webhooks/{hook}/test", timeout=30)
        assert r.status_code == 400, r.text
        assert r.json()["message"] == (
            f"url: no answer: host '{host}' is 127.0.0.1, a loopback address"
        )
        # The attempt is counted when it starts (the lease) and its outcome written after it:
        # wait for the outcome.
        [event] = _wait(
            lambda hook=hook: [
                e for e in _events(world, hook) if e["attempts"] >= 1 and e["last_error"]
            ],
            60,
            "a delivery attempt's outcome",
        )
        assert "is 127.0.0.1, a loopback address" in event["last_error"], event
        assert event["last_status"] is None
    assert receiver.requests == []


def test_the_test_route_and_deliveries_answer_the_status_never_the_body(world: World) -> None:
    bad = Receiver(status=400)
    try:
        # An admin's webhook may reach loopback (as before); alice owns its workspace.
        hook = _insert_hook(world, f"http://127.0.0.1:{bad.port}/h", "admin")
        r = world.alice.post(f"{world.m.url}/api/v1/webhooks/{hook}/test", timeout=30)
        assert r.status_code == 400
        assert r.json()["message"] == "url: the receiver answered 400"
        assert SECRET not in r.text
        [event] = _wait(
            lambda: [e for e in _events(world, hook) if e["failed_at"]], 60, "the delivery"
        )
        assert event["last_status"] == 400 and event["last_error"] is None
        assert SECRET not in json.dumps(_events(world, hook))
        assert len(bad.requests) == 2  # the test and the delivery reached it
    finally:
        bad.close()
    # A host the admin allowed is reached for alice too.
    allowed = Receiver(host="127.0.0.2")
    try:
        made = world.alice.post(
            world.m.url + "/api/v1/webhooks",
            json=_hook(f"http://127.0.0.2:{allowed.port}/h", world.workspace), timeout=30,
        )  # fmt: skip
        assert made.status_code == 200, made.text
        hook = made.json()["webhook"]["id"]
        r = world.alice.post(f"{world.m.url}/api/v1/webhooks/{hook}/test", timeout=30)
        assert r.status_code == 200, r.text
        assert allowed.requests == ["POST /h"]
    finally:
        allowed.close()


# -- checkpoint storage --------------------------------------------------------------------------
def _experiment(session: requests.Session, url: str, extra: str = "") -> requests.Response:
    return session.post(
        url + "/api/v1/experiments", json={"config": CONFIG + extra, "activate": False}, timeout=30
    )


def _storage(endpoint: str) -> str:
    return (
        f"checkpoint_storage: {{type: s3, bucket: {BUCKET}, endpoint_url: '{endpoint}',"
        " access_key: testing, secret_key: testing}\n"
    )


def test_a_non_admins_storage_endpoint_of_each_refused_class_is_refused(world: World) -> None:
    allowed = []
    for host in _refused_hosts():
        r = _experiment(world.alice, world.m.url, _storage(f"http://{host}:9000"))
        if r.status_code != 400 or "checkpoint_storage.endpoint_url: host " not in r.text:
            allowed.append((host, r.status_code, r.text[:200]))
    assert not allowed, allowed
    # The admin may; alice may use the cluster's own endpoint (merged, or named exactly), a
    # host the admin allowed and a public one.
    admin = world.m.session()
    assert _experiment(admin, world.m.url, _storage("http://localhost:9000")).status_code == 200
    for extra in (
        "",
        "checkpoint_storage: {type: s3, bucket: other}\n",
        _storage(world.moto),
        _storage("http://127.0.0.2:9000"),
        _storage("https://8.8.8.8"),
    ):
        r = _experiment(world.alice, world.m.url, extra)
        assert r.status_code == 200, (extra, r.text)


def _checkpoint(world: World, session: requests.Session) -> tuple[int, str]:
    """An experiment of the session's user on the cluster's storage with one checkpoint whose
    file is in moto; returns (experiment id, uuid)."""
    r = _experiment(session, world.m.url)
    assert r.status_code == 200, r.text
    eid = int(r.json()["experiment"]["id"])
    uid = str(uuid.uuid4())
    _s3(world.moto).put_object(Bucket=BUCKET, Key=f"{uid}/model.pt", Body=b"weights")
    with psycopg.connect(world.db, autocommit=True) as c:
        trial = c.execute(
            "INSERT INTO trials (experiment_id, request_id, task_id, hparams, seed, state)"
            " VALUES (%s, 'r1', %s, '{\"lr\": 0.1}', 1, 'COMPLETED') RETURNING id",
            (eid, f"egress-{eid}"),
        ).fetchone()
        assert trial is not None
        c.execute(
            "INSERT INTO checkpoints (uuid, trial_id, task_id, steps_completed, resources)"
            " VALUES (%s, %s, %s, 1, '{\"model.pt\": 7}')",
            (uid, trial[0], f"egress-{eid}"),
        )
    return eid, uid


def _point_storage_at(world: World, eid: int, endpoint: str) -> None:
    with psycopg.connect(world.db, autocommit=True) as c:
        c.execute(
            "UPDATE experiments SET config = jsonb_set(config,"
            " '{checkpoint_storage,endpoint_url}', to_jsonb(%s::text)) WHERE id = %s",
            (endpoint, eid),
        )


def test_a_non_admins_checkpoint_download_from_a_refused_endpoint_is_refused(
    world: World, receiver: Receiver
) -> None:
    eid, uid = _checkpoint(world, world.alice)
    url = f"{world.m.url}/checkpoints/{uid}"
    # The cluster's own storage: read.
    r = world.alice.get(url, timeout=60)
    assert r.status_code == 200, r.text
    refused = []
    for host in _refused_hosts():
        port = receiver.port if host in ("localhost", "127.0.0.1", "[::ffff:127.0.0.1]") else 9
        _point_storage_at(world, eid, f"http://{host}:{port}")
        r = world.alice.get(url, timeout=60)
        if r.status_code != 400 or "checkpoint_storage.endpoint_url: host " not in r.text:
            refused.append((host, r.status_code, r.text[:200]))
    assert not refused, refused
    assert receiver.requests == []
    # The admin's experiment pointed at loopback by a name is read (an admin chose it).
    admin_eid, admin_uid = _checkpoint(world, world.m.session())
    _point_storage_at(world, admin_eid, world.moto.replace("127.0.0.1", "localhost"))
    r = world.m.session().get(f"{world.m.url}/checkpoints/{admin_uid}", timeout=60)
    assert r.status_code == 200, r.text


# -- strict integers ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/experiments/continue", {"id": True}, "id"),
        ("/api/v1/experiments/continue", {"id": False}, "id"),
        ("/api/v1/webhooks/custom", {"experimentId": True}, "experimentId"),
        ("/api/v1/runs/start", {"runId": True}, "runId"),
        ("/api/v1/tensorboards", {"experimentIds": [True]}, "experimentIds[0]"),
    ],
)
def test_json_true_where_an_integer_id_goes_is_a_400(
    world: World, path: str, body: dict[str, Any], field: str
) -> None:
    r = world.alice.post(world.m.url + path, json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["message"].startswith(f"{field}: input should be a valid integer"), r.text


def test_the_context_upload_still_takes_integer_file_types(world: World) -> None:
    # Integers elsewhere in a body are untouched (a model definition file's type is 48).
    body = {
        "config": CONFIG, "activate": False,
        "modelDefinition": [{"path": "train.py", "type": 48,
                             "content": base64.b64encode(b"print(1)\n").decode()}],
    }  # fmt: skip
    r = world.alice.post(world.m.url + "/api/v1/experiments", json=body, timeout=30)
    assert r.status_code == 200, r.text
