"""Webhook delivery that isolates receivers, against a real det-master process and local HTTP
receivers: a healthy one gets every event within seconds while one hangs past the timeout and
one is down; the down one gets each event exactly once per id when it comes up, the hanging one
every id once it answers; a dead letter is re-sent with ``det webhook resend``; a URL patched
with events queued loses none; a master killed mid-delivery leaves the event to the next one.

The master's ``webhooks.delivery`` is set small (2 s timeout, retries from 0.3 s up to 1 s, dead
letters after 30 s, or 5 s) so the test takes seconds. Events are CUSTOM alerts (``POST
/api/v1/webhooks/custom``) for one experiment that names every webhook (no agent needed)."""

from __future__ import annotations

import base64
import http.server
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.compat.official import ensure_official_venv
from tests.fakes.local_http import LocalHttpFake, TestHTTPServer
from tests.fakes.sim_agent import wait
from tests.integration.cli_support import Det
from tests.integration.conftest import Master, start_master
from tests.integration.test_official_client_answers import Official

pytestmark = pytest.mark.integration

TIMEOUT = 2.0
DELIVERY = {
    "timeout_seconds": TIMEOUT,
    "retry_initial_seconds": 0.3,
    "retry_max_seconds": 1.0,
    "dead_letter_after_seconds": 30.0,
}
#: The dead-letter test's master gives up sooner.
SOON = {**DELIVERY, "dead_letter_after_seconds": 5.0}


class Receiver(LocalHttpFake):
    """Records each POST (its event id header and body) and answers 200, after ``hang``
    seconds while that is set. ``port``: listen there (a port reserved while it was down)."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.hang = 0.0
        self.got: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                fake: Receiver = self.server.fake  # type: ignore[attr-defined]
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with fake.lock:
                    fake.got.append((self.headers.get("X-Det-Event-Id", ""), json.loads(body)))
                if fake.hang:
                    time.sleep(fake.hang)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def start(self) -> Receiver:
        server = TestHTTPServer(("127.0.0.1", self.port), self.handler())
        server.fake = self  # type: ignore[attr-defined]
        self._server = server
        self.port = server.server_address[1]
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def ids(self) -> Counter[str]:
        with self.lock:
            return Counter(i for i, _ in self.got)


def down_port() -> int:
    """A port nothing listens on (a receiver that is down until a :class:`Receiver` takes it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def master(tmp_path: Path, migrated_db: str) -> Iterator[Master]:
    m = start_master(tmp_path, migrated_db, extra={"webhooks": {"delivery": DELIVERY}})
    yield m
    m.kill()


def _hook(m: Master, name: str, url: str) -> int:
    made = m.post(
        "/api/v1/webhooks",
        {
            "name": name,
            "url": url,
            "webhookType": "WEBHOOK_TYPE_DEFAULT",
            "mode": "WEBHOOK_MODE_SPECIFIC",
            "triggers": [{"triggerType": "TRIGGER_TYPE_CUSTOM", "condition": {}}],
        },
    )
    return int(made["webhook"]["id"])


def _experiment(m: Master, *hooks: str) -> int:
    config = (
        "name: alerts\nentrypoint: python3 train.py\n"
        "searcher: {name: single, metric: loss, max_length: {batches: 4}}\n"
        f"integrations: {{webhooks: {{webhook_name: [{', '.join(hooks)}]}}}}\n"
    )
    body = {
        "config": config,
        "modelDefinition": [
            {"path": "train.py", "type": 48, "content": base64.b64encode(b"print(1)\n").decode()}
        ],
        "activate": False,
    }
    return int(m.post("/api/v1/experiments", body)["experiment"]["id"])


def _alerts(m: Master, eid: int, n: int) -> None:
    for i in range(n):
        m.post(
            "/api/v1/webhooks/custom",
            {"experimentId": eid, "data": {"title": f"alert {i}", "level": "LOG_LEVEL_INFO"}},
        )


def _events(m: Master, hook_id: int, state: str = "") -> list[dict[str, Any]]:
    params = {"state": state} if state else {}
    return list(m.get(f"/api/v1/webhooks/{hook_id}/events", params=params)["events"])


def test_a_hanging_and_a_down_receiver_delay_only_themselves(master: Master) -> None:
    healthy, hanging = Receiver().start(), Receiver().start()
    hanging.hang = TIMEOUT * 2.5  # longer than the master waits
    down = Receiver(down_port())
    try:
        hooks = {
            "healthy": _hook(master, "healthy", healthy.url),
            "hanging": _hook(master, "hanging", hanging.url),
            "down": _hook(master, "down", down.url),
        }
        eid = _experiment(master, *hooks)
        n = 6
        _alerts(master, eid, n)
        posted = time.monotonic()
        # The healthy one: every event within seconds, once each, while the others stall.
        wait(lambda: len(healthy.ids()) == n, 8, "the healthy receiver's events")
        took = time.monotonic() - posted
        assert took < 8, took
        assert set(healthy.ids().values()) == {1}
        assert len(hanging.ids()) < n  # it holds its own queue only
        # Each request carried the event id in a header and in the payload, and the events list
        # shows the same id with its type.
        assert all(i == body["event_id"] for i, body in healthy.got)
        listed = _events(master, hooks["healthy"])
        assert {e["event_id"] for e in listed} == set(healthy.ids())
        assert {(e["event_type"], e["state"]) for e in listed} == {("CUSTOM", "DELIVERED")}

        # The down one comes up: every event exactly once per id.
        assert down.ids() == Counter()
        down.start()
        wait(lambda: len(down.ids()) == n, 20, "the recovered receiver's events")
        time.sleep(1.5)  # time for a duplicate to show, were one sent
        assert set(down.ids().values()) == {1}, down.ids()
        assert all(e["state"] == "DELIVERED" for e in _events(master, hooks["down"]))

        # The hanging one answers again: every id arrives (at least once: what it got while
        # the master had stopped waiting is sent again), none dead.
        hanging.hang = 0
        wait(lambda: len(hanging.ids()) == n, 30, "the hanging receiver's events")
        wait(
            lambda: all(e["state"] == "DELIVERED" for e in _events(master, hooks["hanging"])),
            20,
            "the hanging receiver's deliveries recorded",
        )
        assert len({i for i, _ in healthy.got} & {i for i, _ in down.got}) == 0
    finally:
        for r in (healthy, hanging, down):
            r.stop()


def test_a_dead_letter_is_resent_from_the_cli(
    tmp_path: Path, migrated_db: str, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = Receiver(down_port())
    master = start_master(tmp_path, migrated_db, extra={"webhooks": {"delivery": SOON}})
    try:
        hook_id = _hook(master, "later", receiver.url)
        _alerts(master, _experiment(master, "later"), 2)
        dead = wait(
            lambda: (ev := _events(master, hook_id, "DEAD")) and len(ev) == 2 and ev,
            30,
            "two dead letters",
        )
        # The oldest was retried until it gave up; the other waited behind it (one probe of a
        # failing receiver per interval).
        assert max(e["attempts"] for e in dead) >= 3
        time.sleep(1)
        assert [e["state"] for e in _events(master, hook_id)] == ["DEAD", "DEAD"]
        receiver.start()

        home = tmp_path / "home"
        home.mkdir()
        det = Det(master, home, capsys, monkeypatch)
        det.login()
        listed = det("webhook", "events", str(hook_id), "--state", "dead")
        assert listed.rc == 0 and dead[0]["event_id"] in listed.out
        one = det("webhook", "resend", str(hook_id), dead[0]["event_id"])
        assert one.rc == 0, one.err
        assert one.out.splitlines() == [
            f"re-queued 1 event(s) of webhook {hook_id}",
            dead[0]["event_id"],
        ]
        wait(lambda: dead[0]["event_id"] in receiver.ids(), 10, "the re-sent event")
        rest = det("webhook", "resend", str(hook_id))
        assert rest.rc == 0 and dead[1]["event_id"] in rest.out
        wait(lambda: len(receiver.ids()) == 2, 10, "both re-sent events")
        assert set(receiver.ids()) == {e["event_id"] for e in dead}
        assert set(receiver.ids().values()) == {1}
        after = wait(
            lambda: (
                (ev := _events(master, hook_id))
                and all(e["state"] == "DELIVERED" for e in ev)
                and ev
            ),
            10,
            "the deliveries recorded",
        )
        assert [e["resends"] for e in after] == [1, 1]
        # Nothing left to re-send; an unknown id is refused in one line.
        assert det("webhook", "resend", str(hook_id)).out.startswith("re-queued 0 event(s)")
        bad = det("webhook", "resend", str(hook_id), "not-an-id")
        assert bad.rc != 0 and "eventIds[0]" in bad.err and len(bad.err.strip().splitlines()) == 1
    finally:
        receiver.stop()
        master.kill()


def test_a_url_patched_with_events_queued_loses_none(master: Master, tmp_path: Path) -> None:
    old_port = down_port()
    new = Receiver().start()
    try:
        hook_id = _hook(master, "rotated", f"http://127.0.0.1:{old_port}/hook")
        _alerts(master, _experiment(master, "rotated"), 4)
        wait(
            lambda: any(e["attempts"] >= 2 for e in _events(master, hook_id)),
            10,
            "retries at the old URL",
        )
        queued = {e["event_id"] for e in _events(master, hook_id)}
        assert len(queued) == 4
        assert {e["state"] for e in _events(master, hook_id)} == {"PENDING"}
        # The official client's PatchWebhook (its bindings: the body is the new URL).
        home = tmp_path / "official"
        home.mkdir()
        official = Official(ensure_official_venv(), master, home)
        got = official.python(
            f"""
            body = bindings.v1PatchWebhook(url={new.url!r})
            bindings.patch_PatchWebhook(session, id={hook_id}, body=body)
            hooks = bindings.get_GetWebhooks(session).webhooks
            print(json.dumps([h.url for h in hooks if h.id == {hook_id}]))
            """
        )
        assert got == [new.url]
        wait(lambda: len(new.ids()) == 4, 15, "the queued events at the new URL")
        assert set(new.ids()) == queued
        assert set(new.ids().values()) == {1}
        # Triggers are det's addition to the patch; a bad one changes nothing.
        bad = master.session().patch(
            f"{master.url}/api/v1/webhooks/{hook_id}",
            json={"triggers": [{"triggerType": "TRIGGER_TYPE_NOPE"}]},
            timeout=30,
        )
        assert bad.status_code == 400 and "triggers[0].triggerType" in bad.json()["message"]
        for body, field in (({"url": "ftp://x"}, "url:"), ({"name": "x"}, "request body:")):
            bad = master.session().patch(
                f"{master.url}/api/v1/webhooks/{hook_id}", json=body, timeout=30
            )
            assert bad.status_code == 400 and bad.json()["message"].startswith(field), bad.text
        [hook] = [h for h in master.get("/api/v1/webhooks")["webhooks"] if h["id"] == hook_id]
        assert (hook["url"], [t["triggerType"] for t in hook["triggers"]]) == (
            new.url,
            ["TRIGGER_TYPE_CUSTOM"],
        )
        r = master.session().patch(
            f"{master.url}/api/v1/webhooks/{hook_id}",
            json={
                "triggers": [
                    {
                        "triggerType": "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE",
                        "condition": {"state": "PAUSED"},
                    }
                ]
            },
            timeout=30,
        )
        assert r.status_code == 200, r.text
        [hook] = [h for h in master.get("/api/v1/webhooks")["webhooks"] if h["id"] == hook_id]
        assert [t["triggerType"] for t in hook["triggers"]] == [
            "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE"
        ]
    finally:
        new.stop()


def test_a_master_killed_mid_delivery_sends_again(tmp_path: Path, migrated_db: str) -> None:
    receiver = Receiver().start()
    receiver.hang = 60  # the first master is killed while it waits
    first = start_master(tmp_path, migrated_db, extra={"webhooks": {"delivery": DELIVERY}})
    try:
        hook_id = _hook(first, "slow", receiver.url)
        _alerts(first, _experiment(first, "slow"), 1)
        wait(lambda: receiver.ids(), 10, "the first attempt under way")
        first.kill()
    finally:
        first.kill()
    receiver.hang = 0
    second = start_master(
        tmp_path, migrated_db, extra={"webhooks": {"delivery": DELIVERY}}, name="second"
    )
    try:
        [event] = wait(
            lambda: [e for e in _events(second, hook_id) if e["state"] == "DELIVERED"],
            40,
            "the event delivered by the next master",
        )
        assert event["event_id"] in receiver.ids()
        assert receiver.ids()[event["event_id"]] >= 2  # at least once: sent again, same id
    finally:
        second.kill()
        receiver.stop()
