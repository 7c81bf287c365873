"""Webhooks against a real local HTTP receiver: deliveries on an experiment's COMPLETED (signed
as Determined signs them), once per task for a matching log line, a custom event from training
code, retries of a failing receiver with the last status recorded, and who may make which.
Deliveries are sent by the master's control loop, which runs beside its app in the test's
process (``master``: ``loop_master_factory``); who may create which webhook, the refusals and
the test route ask the API alone (``api``: the app, no loop)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import requests
from psycopg.rows import dict_row

from tests.fakes.local_http import TestHTTPServer
from tests.fakes.sim_agent import RetryingSession, SimAgent, default_training, wait
from tests.integration.conftest import MasterClient
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration

KEY = "test-signing-key-0123"

CONFIG = """
name: hooked
entrypoint: python3 train.py
searcher: {name: single, metric: validation_loss, max_length: {batches: 4}}
hyperparameters: {lr: 0.1}
"""


class Receiver:
    """An http.server thread that records each request and answers ``statuses`` in turn
    (the last one repeated)."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.statuses = list(statuses or [200])
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests.append({"headers": dict(self.headers), "body": body})
                status = outer.statuses.pop(0) if len(outer.statuses) > 1 else outer.statuses[0]
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = TestHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r["body"]) for r in self.requests]


@pytest.fixture
def master(loop_master_factory: Any, pg_url: str) -> InProcessMaster:
    """The master's app with its control loop (which sends the deliveries) in the test's
    process, on the test's database."""
    m: InProcessMaster = loop_master_factory(extra={"webhooks": {"signing_key": KEY}})
    return m


@pytest.fixture
def api(tmp_path: Any, migrated_db: str) -> Iterator[MasterClient]:
    """The same master's app in the test's process (no loop, no port)."""
    from tests.integration.inproc import in_process_master

    with in_process_master(tmp_path, migrated_db, {"webhooks": {"signing_key": KEY}}) as m:
        yield m


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _hook(url: str, trigger: str, condition: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {
        "name": kw.pop("name", "h"),
        "url": url,
        "webhookType": kw.pop("webhookType", "WEBHOOK_TYPE_DEFAULT"),
        "triggers": [{"triggerType": trigger, "condition": condition}],
        **kw,
    }


def _create_experiment(m: InProcessMaster, config: str = CONFIG) -> int:
    body = {
        "config": config,
        "modelDefinition": [
            {"path": "train.py", "type": 48, "content": base64.b64encode(b"print(1)\n").decode()}
        ],
        "activate": True,
    }
    return int(m.post("/api/v1/experiments", body)["experiment"]["id"])


def _state(m: InProcessMaster, eid: int) -> str:
    return str(m.get(f"/api/v1/experiments/{eid}")["experiment"]["state"])


def test_completed_fires_signed_default_and_slack(
    master: InProcessMaster, receiver: Receiver
) -> None:
    cond = {"state": "COMPLETED"}
    made = master.post(
        "/api/v1/webhooks", _hook(receiver.url, "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE", cond)
    )
    assert made["webhook"]["triggers"][0]["condition"] == cond
    slack = Receiver()
    try:
        master.post(
            "/api/v1/webhooks",
            _hook(slack.url, "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE", cond, name="s",
                  webhookType="WEBHOOK_TYPE_SLACK"),
        )  # fmt: skip
        agent = SimAgent(master.url, master.agent_token, "wh-sim-0").start()
        try:
            eid = _create_experiment(master)
            wait(lambda: _state(master, eid) == "STATE_COMPLETED", 120, "experiment to complete")
            wait(lambda: receiver.requests and slack.requests, 60, "the deliveries")
        finally:
            agent.stop()
        assert len(receiver.requests) == 1
        req = receiver.requests[0]
        ts = req["headers"]["X-Determined-AI-Signature-Timestamp"]
        want = hmac.new(KEY.encode(), f"{ts},".encode() + req["body"], hashlib.sha256).hexdigest()
        assert req["headers"]["X-Determined-AI-Signature"] == want
        event = json.loads(req["body"])
        assert event["event_type"] == "EXPERIMENT_STATE_CHANGE"
        assert event["condition"] == {"state": "COMPLETED"}
        assert event["event_data"]["experiment"]["id"] == eid
        assert event["event_data"]["experiment"]["state"] == "COMPLETED"
        assert event["event_data"]["experiment"]["name"] == "hooked"
        text = json.dumps(slack.bodies()[0])
        assert "completed successfully" in text and f"(#{eid})" in text
        # The delivery is recorded with its status.
        hook_id = made["webhook"]["id"]
        events = master.get(f"/api/v1/webhooks/{hook_id}/events")["events"]
        assert [(e["attempts"], e["last_status"]) for e in events] == [(1, 200)]
        assert events[0]["delivered_at"]
    finally:
        slack.close()


def test_log_regex_fires_once_per_task(master: InProcessMaster, receiver: Receiver) -> None:
    master.post(
        "/api/v1/webhooks",
        _hook(receiver.url, "TRIGGER_TYPE_TASK_LOG", {"regex": "CUDA out of mem"}),
    )

    def noisy(url: str, spec: dict[str, Any], killed: threading.Event) -> int:
        env = spec["env"]
        s = RetryingSession()
        s.headers["Grpc-Metadata-x-allocation-token"] = f"Bearer {env['DET_SESSION_TOKEN']}"
        lines = ["starting", "RuntimeError: CUDA out of memory", "again: CUDA out of memory"]
        logs = [{"taskId": env["DET_TASK_ID"], "log": x, "agentId": "wh-sim-1"} for x in lines]
        s.post(f"{url}/api/v1/task/logs", json={"logs": logs}, timeout=30).raise_for_status()
        s.post(f"{url}/api/v1/task/logs", json={"logs": logs[1:]}, timeout=30).raise_for_status()
        return default_training(url, spec, killed, steps=4)

    agent = SimAgent(master.url, master.agent_token, "wh-sim-1", train=noisy).start()
    try:
        eid = _create_experiment(master)
        wait(lambda: _state(master, eid) == "STATE_COMPLETED", 120, "experiment to complete")
        wait(lambda: receiver.requests, 60, "the delivery")
    finally:
        agent.stop()
    [event] = receiver.bodies()
    assert event["event_type"] == "TASK_LOG"
    assert event["condition"] == {"regex": "CUDA out of mem"}
    assert event["event_data"]["task_log"]["triggering_log"] == "RuntimeError: CUDA out of memory"
    assert event["event_data"]["task_log"]["node_name"] == "wh-sim-1"


def test_failing_receiver_is_retried_and_last_status_recorded(master: InProcessMaster) -> None:
    bad = Receiver([500, 503, 200])
    try:
        made = master.post(
            "/api/v1/webhooks",
            _hook(bad.url, "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE", {"state": "PAUSED"}),
        )
        hook_id = made["webhook"]["id"]
        eid = _create_experiment(master)
        master.post(f"/api/v1/experiments/{eid}/pause")
        wait(lambda: len(bad.requests) >= 3, 60, "three attempts")
        events = wait(
            lambda: [
                e
                for e in master.get(f"/api/v1/webhooks/{hook_id}/events")["events"]
                if e["delivered_at"]
            ],
            30,
            "the delivery recorded",
        )
        assert [(e["attempts"], e["last_status"]) for e in events] == [(3, 200)]
        # Each attempt was the same signed event.
        assert len({r["body"] for r in bad.requests}) == 1
    finally:
        bad.close()
    # A receiver that always fails: the status of the last attempt is kept while it retries.
    worse = Receiver([502])
    try:
        made = master.post(
            "/api/v1/webhooks",
            _hook(worse.url, "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE", {"state": "ACTIVE"}),
        )
        master.post(f"/api/v1/experiments/{eid}/activate")
        hook_id = made["webhook"]["id"]
        wait(lambda: len(worse.requests) >= 2, 60, "two attempts")
        [event] = wait(
            lambda: [
                e
                for e in master.get(f"/api/v1/webhooks/{hook_id}/events")["events"]
                if e["attempts"] >= 2 and e["last_status"] == 502
            ],
            30,
            "the failure recorded",
        )
        assert event["delivered_at"] is None
        assert event["last_error"] is None  # the status alone: an answer's body is never kept
    finally:
        worse.close()


def _user(m: MasterClient, name: str) -> requests.Session:
    m.post("/api/v1/users", {"user": {"username": name, "active": True}, "password": "Pw-12345678"})
    return m.session(m.login(name, "Pw-12345678"))


def test_who_may_create_which(api: MasterClient, receiver: Receiver) -> None:
    alice = _user(api, "alice")
    hook = _hook(receiver.url, "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE", {"state": "COMPLETED"})
    r = alice.post(api.url + "/api/v1/webhooks", json=hook, timeout=30)
    assert r.status_code == 403, r.text
    assert "admins only" in r.json()["message"]
    assert api.get("/api/v1/webhooks")["webhooks"] == []

    ws = alice.post(api.url + "/api/v1/workspaces", json={"name": "alices"}, timeout=30)
    ws_id = ws.json()["workspace"]["id"]
    # Alice's own workspace: yes, but not to this machine's loopback.
    r = alice.post(api.url + "/api/v1/webhooks", json={**hook, "workspaceId": ws_id}, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["message"].startswith("url: host '127.0.0.1' is 127.0.0.1")
    for url in ("http://169.254.169.254/latest/meta-data/", "http://[::1]:80/", "http://0.0.0.0/"):
        r = alice.post(
            api.url + "/api/v1/webhooks", json={**hook, "workspaceId": ws_id, "url": url},
            timeout=30,
        )  # fmt: skip
        assert r.status_code == 400, (url, r.text)
    # An admin's webhook in alice's workspace may use it; alice may delete it, bob may not.
    made = api.post("/api/v1/webhooks", {**hook, "workspaceId": ws_id})
    bob = _user(api, "bob")
    hid = made["webhook"]["id"]
    assert bob.get(api.url + "/api/v1/webhooks", timeout=30).json()["webhooks"] == []
    assert [
        w["id"] for w in alice.get(api.url + "/api/v1/webhooks", timeout=30).json()["webhooks"]
    ] == [hid]
    assert bob.delete(f"{api.url}/api/v1/webhooks/{hid}", timeout=30).status_code == 403
    assert alice.delete(f"{api.url}/api/v1/webhooks/{hid}", timeout=30).status_code == 200
    assert api.get("/api/v1/webhooks")["webhooks"] == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"url": "file:///etc/passwd"}, "url: must be an http:// or https:// URL with a host"),
        ({"url": "http://u:p@example.com/"}, "url: must not carry a user name or password"),
        ({"triggers": []}, "triggers: at least one trigger required"),
        ({"webhookType": "WEBHOOK_TYPE_UNSPECIFIED"}, "webhookType: required"),
        (
            {"triggers": [{"triggerType": "TRIGGER_TYPE_TASK_LOG", "condition": {"regex": "("}}]},
            "triggers[0].condition.regex: not a valid pattern",
        ),
        (
            {"triggers": [{"triggerType": "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE",
                           "condition": {"state": "DONE"}}]},
            "triggers[0].condition: must be {'state': S}",
        ),
        (
            {"triggers": [{"triggerType": "TRIGGER_TYPE_CUSTOM", "condition": {}}]},
            "triggers[0]: a custom trigger needs mode WEBHOOK_MODE_SPECIFIC",
        ),
    ],
)  # fmt: skip
def test_bad_webhooks_are_refused_in_one_line(
    api: MasterClient, change: dict[str, Any], message: str
) -> None:
    hook = {**_hook("http://127.0.0.1:9/", "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE",
                    {"state": "COMPLETED"}), **change}  # fmt: skip
    r = api.session().post(api.url + "/api/v1/webhooks", json=hook, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["message"].startswith(message), r.json()["message"]
    assert api.get("/api/v1/webhooks")["webhooks"] == []


def test_test_route_sends_signed_test_event(api: MasterClient, receiver: Receiver) -> None:
    made = api.post(
        "/api/v1/webhooks",
        _hook(receiver.url, "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE", {"state": "COMPLETED"}),
    )
    api.post(f"/api/v1/webhooks/{made['webhook']['id']}/test")
    [event] = receiver.bodies()
    assert event["event_data"] == {"data": "test"}
    assert receiver.requests[0]["headers"]["X-Determined-AI-Signature"]


def test_custom_event_from_training_code(master: InProcessMaster, receiver: Receiver) -> None:
    master.post(
        "/api/v1/webhooks",
        _hook(receiver.url, "TRIGGER_TYPE_CUSTOM", {}, name="alerts", mode="WEBHOOK_MODE_SPECIFIC"),
    )

    def alerting(url: str, spec: dict[str, Any], killed: threading.Event) -> int:
        # det's harness: Context.alert() with the task's own env and token (as
        # core_context.alert() runs in a trial), the other contexts unused here.
        from det.common.api import Session
        from det.common.info import cluster_info_from_env
        from det.core._context import Context

        # The agent adds its own ids and slots; the simulated one does not.
        extra = {"DET_MASTER": url, "DET_AGENT_ID": "wh-sim-2", "DET_SLOT_IDS": "[0]"}
        info = cluster_info_from_env({"DET_CLUSTER_ID": "c", **spec["env"], **extra})
        assert info is not None and info.trial is not None
        session = Session(url, allocation_token=info.session_token)
        ctx = Context.__new__(Context)  # only alert() is called: it needs info and a session
        ctx.info, ctx._session = info, session
        try:
            ctx.alert(title="loss spiked", description="at step 2", level="warn")
        finally:
            session.close()
        return default_training(url, spec, killed, steps=4)

    agent = SimAgent(master.url, master.agent_token, "wh-sim-2", train=alerting).start()
    try:
        config = CONFIG + "integrations: {webhooks: {webhook_name: [alerts]}}\n"
        eid = _create_experiment(master, config)
        wait(lambda: _state(master, eid) == "STATE_COMPLETED", 120, "experiment to complete")
        wait(lambda: receiver.requests, 60, "the delivery")
    finally:
        agent.stop()
    [event] = receiver.bodies()
    assert event["event_type"] == "CUSTOM"
    assert event["event_data"]["custom_data"] == {
        "title": "loss spiked", "description": "at step 2", "level": "WARNING"
    }  # fmt: skip
    assert event["event_data"]["experiment"]["id"] == eid


class _DeletesAfterEachStatement:
    """A connection whose every statement is followed by another session's committed deletion
    of one webhook: the interleaving a listing meets when an admin deletes a webhook at once."""

    def __init__(self, conn: Any, db_url: str, victim: int) -> None:
        self._conn, self._db_url, self._victim = conn, db_url, victim

    def cursor(self, *args: Any, **kw: Any) -> Any:
        outer, cur = self, self._conn.cursor(*args, **kw)

        class Cursor:
            def execute(self, *a: Any, **k: Any) -> Any:
                cur.execute(*a, **k)
                with psycopg.connect(outer._db_url, autocommit=True) as other:
                    other.execute("DELETE FROM webhooks WHERE id = %s", (outer._victim,))
                return cur

        return Cursor()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def test_a_listing_that_races_a_deletion_shows_each_webhook_whole_or_not_at_all(
    api: MasterClient, migrated_db: str, receiver: Receiver
) -> None:
    from det.master.services import webhooks

    made = [
        api.post("/api/v1/webhooks", _hook(receiver.url, "TRIGGER_TYPE_TASK_LOG", {"regex": r}))
        for r in ("one", "two")
    ]
    victim, kept = (w["webhook"]["id"] for w in made)
    with psycopg.connect(migrated_db, row_factory=dict_row, autocommit=True) as conn:
        listed = webhooks.list_(_DeletesAfterEachStatement(conn, migrated_db, victim))
    assert [w.id for w in listed] in ([victim, kept], [kept])
    for w in listed:
        assert [t.condition for t in w.triggers] == [{"regex": "one" if w.id == victim else "two"}]
    assert [w["id"] for w in api.get("/api/v1/webhooks")["webhooks"]] == [kept]
