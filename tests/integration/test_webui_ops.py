# ruff: noqa: F811 (the fixtures imported from webui_support are parameters here)
"""The admin's WebUI in Chromium (issue 41 build item 6, issue 38 item 6), on one master for the
module with simulated agents: the job queue names each job's kind and links it to its own page;
the link Determined's CLI opens waits for a notebook and opens it (another user's only on a
click; an ended one says so); webhooks created, edited, their dead letters re-sent; the master's
log followed; the usage CSV downloaded; an agent drained, disabled and enabled; the container
policy edited by an admin and read only by a user."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.fakes.local_http import TestHTTPServer
from tests.fakes.sim_agent import Holder, SimAgent
from tests.integration.cli_support import create_via_api, sim_config
from tests.integration.conftest import wait_for
from tests.integration.task_origin_support import FakeTask
from tests.integration.threaded import ThreadedMaster, threaded_master
from tests.integration.webui_support import (  # noqa: F401
    browser,
    login,
    module_db,
    page,
    post_logs,
    screenshot,
)

pytestmark = [pytest.mark.integration, pytest.mark.browser]

USER_PW = "Carol-pw-1"


@dataclass
class Ops:
    master: ThreadedMaster
    experiment: int  # a finished experiment with checkpoints


@pytest.fixture(scope="module")
def ops(tmp_path_factory: Any, module_db: str) -> Iterator[Ops]:
    delivery = {"retry_initial_seconds": 0.2, "retry_max_seconds": 0.5}
    delivery["dead_letter_after_seconds"] = 3
    with threaded_master(
        tmp_path_factory.mktemp("webui-ops"),
        module_db,
        {"webhooks": {"delivery": delivery}},
        loop=True,
    ) as m:
        with SimAgent(m.url, m.agent_token, "sim-setup", slots=1):
            eid = create_via_api(m, sim_config("webui-ops", trials=1))
            wait_for(
                lambda: (
                    m.get(f"/api/v1/experiments/{eid}")["experiment"]["state"] == "STATE_COMPLETED"
                ),
                120,
                what="the experiment to complete",
            )
        m.post(
            "/api/v1/users", {"user": {"username": "carol", "active": True}, "password": USER_PW}
        )
        yield Ops(m, eid)


def _no_agents(m: ThreadedMaster) -> None:
    wait_for(lambda: not m.get("/api/v1/agents")["agents"], 60, what="no agent connected")


def _kill_tasks(m: ThreadedMaster) -> None:
    for path in ("commands", "notebooks", "shells", "tensorboards"):
        for x in m.get(f"/api/v1/{path}")[path]:
            if x["state"] != "STATE_TERMINATED":
                m.post(f"/api/v1/{path}/{x['id']}/kill")


def test_the_job_queue_names_each_kind_and_links_its_own_page(ops: Ops, page: Any) -> None:
    m = ops.master
    _no_agents(m)  # everything below waits in the queue
    eid = create_via_api(m, sim_config("queued-exp", trials=1))
    nid = m.post("/api/v1/notebooks", {"config": {"description": "queued nb"}})["notebook"]["id"]
    cid = m.post("/api/v1/commands", {"config": {"entrypoint": ["sleep", "9"]}})["command"]["id"]
    sid = m.post("/api/v1/shells", {"config": {}})["shell"]["id"]
    tid = m.post("/api/v1/tensorboards", {"experimentIds": [ops.experiment]})["tensorboard"]["id"]
    # Deleting a checkpoint of the finished experiment queues its checkpoint GC task.
    (ck, *_) = m.get(f"/api/v1/experiments/{ops.experiment}/checkpoints")["checkpoints"]
    r = m.session().delete(
        m.url + "/api/v1/checkpoints", json={"checkpointUuids": [ck["uuid"]]}, timeout=30
    )
    assert r.status_code == 200, r.text
    try:
        login(page, m, "/det/jobs")
        want = {
            "experiment": (f"/det/experiments/{eid}", "experiment "),
            "notebook": (f"/det/tasks/{nid}", "notebook "),
            "command": (f"/det/tasks/{cid}", "command "),
            "shell": (f"/det/tasks/{sid}", "shell "),
            "TensorBoard": (f"/det/tasks/{tid}", "TensorBoard "),
            "checkpoint GC": (
                f"/det/experiments/{ops.experiment}",
                f"checkpoint GC of experiment {ops.experiment}",
            ),
        }
        for kind, (href, text) in want.items():
            a = page.locator(f"a[data-kind='{kind}']")
            a.first.wait_for()
            hrefs = [a.nth(i).get_attribute("href") for i in range(a.count())]
            assert href in hrefs, (kind, hrefs)
            row = page.locator("tbody tr", has=page.locator(f"a[href='{href}']")).first
            assert row.locator("td").nth(1).inner_text() == kind
            assert text in row.inner_text()
        # No task is linked as an experiment (the old queue sent a notebook to
        # /det/experiments/<uuid>).
        for x in (nid, cid, sid, tid):
            assert page.locator(f"a[href='/det/experiments/{x}']").count() == 0
        screenshot(page, "jobs")
        # The notebook's link opens its task page.
        page.locator(f"a[href='/det/tasks/{nid}']").click()
        page.wait_for_url(f"**/det/tasks/{nid}")
        page.wait_for_selector("h1:has-text('Notebook')")
        assert "queued nb" in page.locator(".task-summary").inner_text()
    finally:
        _kill_tasks(m)
        m.post(f"/api/v1/experiments/{eid}/kill")


class ServingAgent(SimAgent):
    """A simulated agent whose notebooks hold their slot and report their service up (the
    ``proxyPort`` a real agent reports) once ``ready`` is set: at ``port``, a page on this host."""

    def __init__(self, master: str, agent_token: str, agent_id: str, port: int) -> None:
        self.holder = Holder()
        super().__init__(master, agent_token, agent_id, slots=2, train=self.holder)
        self.port = port
        self.ready = threading.Event()

    def _report(self) -> Any:
        out = super()._report()
        out["addresses"] = ["127.0.0.1"]  # where the proxy finds its services
        if self.ready.is_set():
            for c in out["containers"]:
                if c["state"] == "RUNNING":
                    c["proxyPort"] = self.port  # type: ignore[typeddict-unknown-key]
        return out


def _official_link(m: ThreadedMaster, nid: str) -> str:
    """The URL Determined's 0.38.1 CLI opens for a notebook (its own function, in its venv)."""
    from tests.compat.official import ensure_official_venv

    code = (
        "import sys\nfrom determined.cli import ntsc\n"
        "print(ntsc.make_interactive_task_url(task_id=sys.argv[1], service_address="
        "'/proxy/' + sys.argv[1] + '/', description='nb', resource_pool='default',"
        " task_type='jupyter-lab', currentSlotsExceeded=False))"
    )
    out = subprocess.run(
        [str(ensure_official_venv() / "python"), "-c", code, nid],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return f"{m.url}/{out.stdout.strip()}"


def test_the_link_determineds_cli_opens_waits_for_the_notebook_then_opens_it(
    ops: Ops, page: Any
) -> None:
    m = ops.master
    fake = FakeTask(page="<!doctype html><title>nb</title><p id=here>the notebook</p>").start()
    agent = ServingAgent(m.url, m.agent_token, "sim-serving", fake.port)
    agent.start()
    try:
        nid = m.post("/api/v1/notebooks", {"config": {}})["notebook"]["id"]
        url = _official_link(m, nid)
        assert url.startswith(f"{m.url}/det/interactive/{nid}/jupyter-lab/"), url
        login(page, m, "/det/tasks")
        page.goto(url)
        waiting = page.locator("[data-open=waiting]")
        waiting.wait_for()
        assert "it opens here by itself" in waiting.inner_text()
        screenshot(page, "open-waiting")
        agent.ready.set()
        # No click: the admin's own notebook opens in this tab on the tasks' origin.
        page.wait_for_selector("#here", timeout=30_000)
        assert page.url.startswith(f"http://{nid}.localhost:"), page.url

        # Another user's notebook waits for a click (an admin is not sent into it unawares).
        carol = m.login("carol", USER_PW)
        r = m.session(carol).post(m.url + "/api/v1/notebooks", json={"config": {}}, timeout=30)
        theirs = r.json()["notebook"]["id"]
        page.goto(_official_link(m, theirs))
        ready = page.locator("[data-open=ready]")
        ready.wait_for(timeout=30_000)
        assert "carol" in ready.inner_text()
        assert page.url.startswith(m.url)
        page.get_by_role("button", name="Open", exact=True).click()
        page.wait_for_selector("#here")
        assert page.url.startswith(f"http://{theirs}.localhost:"), page.url
    finally:
        _kill_tasks(m)
        agent.holder.release.set()
        agent.stop()
        fake.stop()


def test_a_notebook_that_ends_before_it_is_ready_says_so(ops: Ops, page: Any) -> None:
    m = ops.master
    nid = m.post("/api/v1/notebooks", {"config": {}})["notebook"]["id"]
    login(page, m, "/det/tasks")
    page.goto(_official_link(m, nid))
    page.locator("[data-open=waiting]").wait_for()
    m.post(f"/api/v1/notebooks/{nid}/kill")
    failed = page.locator("[data-open=failed]")
    failed.wait_for(timeout=30_000)
    assert "has ended" in failed.inner_text(), failed.inner_text()
    assert page.get_by_role("link", name="its logs").get_attribute("href") == (
        f"/det/tasks/{nid}/logs"
    )


@dataclass
class Receiver:
    """A webhook receiver on this host: answers 503 while ``down``, records event ids."""

    down: bool = True
    got: list[str] = field(default_factory=list)
    server: TestHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def start(self) -> Receiver:
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not rec.down:
                    rec.got.append(self.headers.get("X-Det-Event-Id") or "")
                self.send_response(503 if rec.down else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = TestHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def _hook(m: ThreadedMaster, name: str) -> dict[str, Any]:
    (w,) = [w for w in m.get("/api/v1/webhooks")["webhooks"] if w["name"] == name]
    return w  # type: ignore[no-any-return]


def test_webhooks_created_edited_and_dead_letters_resent(ops: Ops, page: Any) -> None:
    m = ops.master
    down, up = Receiver().start(), Receiver(down=False).start()
    try:
        login(page, m, "/det/webhooks")
        form = page.locator("form.create-webhook")
        form.locator("input[name=name]").fill("alerts")
        form.locator("input[name=url]").fill(down.url)
        form.locator("textarea[name=triggers]").fill("log ALERT-\\d+")
        form.get_by_role("button", name="Create webhook").click()
        page.locator("[data-webhook]", has_text="Events…").first.wait_for()
        w = _hook(m, "alerts")
        assert w["url"] == down.url
        assert w["triggers"][0]["triggerType"] == "TRIGGER_TYPE_TASK_LOG"
        # A bad trigger line is refused in the page, naming the line.
        form.locator("input[name=name]").fill("bad")
        form.locator("input[name=url]").fill(up.url)
        form.locator("textarea[name=triggers]").fill("state DONE")
        form.get_by_role("button", name="Create webhook").click()
        assert "triggers, line 1 (state DONE)" in form.locator(".form-error").inner_text()

        # Two tasks log a matching line; the receiver is down, so both become dead letters.
        tasks = [
            m.post("/api/v1/commands", {"config": {"entrypoint": ["true"]}})["command"]["id"]
            for _ in range(2)
        ]
        for i, t in enumerate(tasks):
            post_logs(m, t, [{"log": f"ALERT-{i} disk full\n"}])

        def dead() -> list[dict[str, Any]]:
            out = m.get(f"/api/v1/webhooks/{w['id']}/events?state=DEAD")["events"]
            return out if len(out) == 2 else []

        ids = sorted(e["event_id"] for e in wait_for(dead, 60, what="two dead letters"))
        page.locator(f"[data-webhook='{w['id']}']").get_by_role("button", name="Events…").click()
        letters = page.locator(".dead-letters tbody tr")
        wait_for(lambda: letters.count() == 2, 15, what="the dead letters listed")
        text = page.locator(".dead-letters").inner_text()
        assert all(i in text for i in ids) and "TASK_LOG" in text, text
        events = page.locator(".webhook-events").inner_text()
        assert all(i in events for i in ids) and "DEAD" in events

        # The URL is edited to the receiver that is up, then one letter and the rest re-sent.
        page.locator(f"[data-webhook='{w['id']}']").get_by_role("button", name="Edit…").click()
        edit = page.locator("form.edit-webhook")
        edit.locator("input[name=url]").fill(up.url)
        edit.get_by_role("button", name="Save").click()
        wait_for(lambda: _hook(m, "alerts")["url"] == up.url, 15, what="the URL patched")
        assert _hook(m, "alerts")["triggers"] == w["triggers"]
        page.locator(f"[data-webhook='{w['id']}']").get_by_role("button", name="Events…").click()
        page.locator(f".dead-letters button[data-event='{ids[0]}']").click()
        wait_for(lambda: up.got == [ids[0]], 30, what="the one letter re-sent")
        page.locator("button.resend-all").click()
        wait_for(lambda: sorted(up.got) == ids, 30, what="every letter re-sent once")
        wait_for(
            lambda: page.locator(".dead-letters").inner_text().count("No dead letters") == 1,
            30,
            what="no dead letters left",
        )
        screenshot(page, "webhooks")

        # Deleted after one question.
        page.once("dialog", lambda d: d.accept())
        page.locator(f"[data-webhook='{w['id']}']").get_by_role("button", name="Delete").click()
        wait_for(lambda: not m.get("/api/v1/webhooks")["webhooks"], 15, what="the deletion")
    finally:
        down.stop()
        up.stop()
        _kill_tasks(m)


def test_master_logs_followed(ops: Ops, page: Any) -> None:
    m = ops.master
    login(page, m, "/det/master-logs")
    page.wait_for_selector(".log-status:text('following…')")
    lines = page.locator(".master-logs .log-line")
    lines.first.wait_for()
    before = lines.count()
    # Something the master logs while the page follows: an agent registering.
    with SimAgent(m.url, m.agent_token, "sim-logged", slots=1):
        wait_for(
            lambda: "sim-logged" in page.locator(".master-logs").inner_text(),
            30,
            what="the new line followed",
        )
    assert lines.count() > before
    screenshot(page, "master-logs")


def _saved(download: Any, to: Path) -> list[str]:
    download.save_as(to)
    return to.read_text().splitlines()


def test_usage_csv_download(ops: Ops, page: Any, tmp_path: Path) -> None:
    m = ops.master
    login(page, m, "/det/usage")
    page.locator("button.csv-allocations").wait_for()
    with page.expect_download() as got:
        page.locator("button.csv-allocations").click()
    assert got.value.suggested_filename.startswith("allocations-")
    text = _saved(got.value, tmp_path / "allocations.csv")
    header = text[0].split(",")
    assert header[:5] == [
        "allocation_id",
        "task_type",
        "username",
        "workspace_name",
        "experiment_id",
    ]
    assert "cost_usd" in header
    trials = [r.split(",") for r in text[1:] if r.split(",")[1] == "TRIAL"]
    assert any(r[2] == "admin" and r[4] == str(ops.experiment) for r in trials), text
    with page.expect_download() as got:
        page.locator("button.csv-aggregated").click()
    agg = _saved(got.value, tmp_path / "aggregated.csv")
    assert agg[0] == "aggregation_type,aggregation_key,date,seconds,cost_usd"
    assert any(r.startswith("total,total,") for r in agg[1:]), agg


def test_an_agent_drained_disabled_and_enabled(ops: Ops, page: Any) -> None:
    m = ops.master
    with SimAgent(m.url, m.agent_token, "sim-drain", slots=1):
        wait_for(
            lambda: any(a["id"] == "sim-drain" for a in m.get("/api/v1/agents")["agents"]),
            30,
            what="the agent registered",
        )
        login(page, m, "/det/agents")
        row = page.locator("tbody tr", has=page.locator("[data-agent='sim-drain']"))
        row.wait_for()
        assert row.locator(".agent-status").inner_text() == "ready"
        page.once("dialog", lambda d: d.accept())
        row.get_by_role("button", name="Drain").click()
        wait_for(lambda: row.locator(".agent-status").inner_text() == "draining", 15)
        agent = m.get("/api/v1/agents/sim-drain")["agent"]
        assert agent["enabled"] is False and agent["draining"] is True
        screenshot(page, "agents")
        row.get_by_role("button", name="Enable").click()
        wait_for(lambda: row.locator(".agent-status").inner_text() == "ready", 15)
        page.once("dialog", lambda d: d.accept())
        row.get_by_role("button", name="Disable").click()
        wait_for(lambda: row.locator(".agent-status").inner_text() == "disabled", 15)
        agent = m.get("/api/v1/agents/sim-drain")["agent"]
        assert agent["enabled"] is False and not agent["draining"]
        m.post("/api/v1/agents/sim-drain/enable")


def test_admin_pages_hidden_from_a_user(ops: Ops, page: Any) -> None:
    m = ops.master
    login(page, m, "/det/agents", user="carol", password=USER_PW)
    page.locator("tbody tr, p.muted").first.wait_for()
    assert page.locator("[data-agent] button").count() == 0
    for path in ("/det/webhooks", "/det/master-logs"):
        assert not page.locator(f"#nav a[href='{path}']").is_visible()
        page.goto(m.url + path)
        assert "Only an admin" in page.locator("p.refused").inner_text()
    # The API refuses the same.
    carol = m.session(m.login("carol", USER_PW))
    assert carol.post(m.url + "/api/v1/agents/x/disable", json={}, timeout=30).status_code == 403
    logs = carol.get(m.url + "/api/v1/master/logs", timeout=30)
    assert logs.status_code == 403, logs.text
    r = requests.get(m.url + "/api/v1/webhooks", timeout=30)
    assert r.status_code == 401


def test_the_container_policy_edited_by_an_admin_and_read_only_for_a_user(
    ops: Ops, page: Any, browser: Any
) -> None:
    m = ops.master
    login(page, m, "/det/policy")
    current = page.locator(".policy-current")
    current.locator("[data-key=protected_host_paths]").wait_for()
    assert "master.yaml" in current.inner_text()
    text = page.locator("textarea[name=policy]")
    form = page.locator("form.policy-form")
    # A bad policy: the master's one line, nothing stored.
    text.fill('{"protected_host_paths": ["relative/dir"]}')
    form.get_by_role("button", name="Save").click()
    error = form.locator(".form-error")
    wait_for(lambda: error.inner_text() != "", 15, what="the refusal")
    assert error.inner_text().startswith("save policy: ") and "protected_host_paths" in (
        error.inner_text()
    ), error.inner_text()
    assert "\n" not in error.inner_text()
    assert m.get("/api/v1/master/task-container-policy")["source"] == "master.yaml"
    # A good one: stored, shown with who changed it, and in the history.
    text.fill('{"protected_host_paths": ["/srv/secret"], "add_capabilities": []}')
    form.get_by_role("button", name="Save").click()
    form.locator("text=Saved").wait_for()
    stored = m.get("/api/v1/master/task-container-policy")
    assert stored["source"] == "database" and stored["updatedBy"] == "admin"
    assert stored["policy"]["protected_host_paths"] == ["/srv/secret"]
    assert "/srv/secret" in current.locator("[data-key=protected_host_paths]").inner_text()
    assert "the database" in current.inner_text() and "admin" in current.inner_text()
    history = page.locator(".policy-history tbody tr")
    wait_for(lambda: history.count() == 1, 15, what="the history row")
    assert "/srv/secret" in history.first.inner_text()
    screenshot(page, "policy")

    # A user reads it, with no form; the API refuses the user's change.
    context = browser.new_context()
    try:
        user = context.new_page()
        login(user, m, "/det/policy", user="carol", password=USER_PW)
        user.locator("[data-key=protected_host_paths]").wait_for()
        assert "/srv/secret" in user.locator(".policy-current").inner_text()
        assert user.locator("p.read-only").is_visible()
        assert user.locator("textarea, form.policy-form").count() == 0
        assert user.locator(".policy-history").inner_text() == ""
    finally:
        context.close()
    carol = m.session(m.login("carol", USER_PW))
    r = carol.put(m.url + "/api/v1/master/task-container-policy", json={"policy": {}}, timeout=30)
    assert r.status_code == 403, r.text
    assert m.get("/api/v1/master/task-container-policy")["policy"]["protected_host_paths"] == [
        "/srv/secret"
    ]
