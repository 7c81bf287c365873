# ruff: noqa: F811 (the fixtures imported from webui_support are parameters here)
"""The WebUI in a real browser (Debian's Chromium driven by Playwright) against a live master."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from tests.fakes.sim_agent import SimAgent
from tests.integration.conftest import ADMIN_PASSWORD, wait_for
from tests.integration.threaded import ThreadedMaster
from tests.integration.webui_support import browser, create, login, page  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.browser]

SEARCH = """
name: webui-search
entrypoint: python3 train.py
searcher: {name: random, metric: validation_loss, max_trials: 2, max_concurrent_trials: 2}
hyperparameters: {lr: {type: double, minval: 0.1, maxval: 1.0}}
max_restarts: 0
"""


def test_pages_need_a_login_and_a_wrong_password_is_refused(
    threaded_master: ThreadedMaster, page: Any
) -> None:
    page.goto(threaded_master.url + "/det/experiments")
    page.wait_for_url("**/det/login?next=%2Fdet%2Fexperiments")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", "not-the-password")
    page.click("button[type=submit]")
    page.wait_for_selector(".form-error:text-matches('.+')")
    assert "/det/login" in page.url
    page.fill("input[name=password]", ADMIN_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(threaded_master.url + "/det/experiments")
    assert page.inner_text("h1") == "Experiments"
    # Who is logged in comes from /api/v1/me, answered after the page (it was read too early).
    page.wait_for_selector("#who:has-text('admin')")
    # Logging out revokes the session: the stored token no longer works against the API.
    token = page.evaluate("localStorage.getItem('det.token')")
    assert threaded_master.session(token).get(threaded_master.url + "/api/v1/me").status_code == 200
    page.click("#who button")
    page.wait_for_url("**/det/login")
    assert threaded_master.session(token).get(threaded_master.url + "/api/v1/me").status_code == 401


def test_a_finished_search_shows_its_trials_curves_metrics_checkpoints_and_logs(
    threaded_master: ThreadedMaster, page: Any
) -> None:
    agent = SimAgent(threaded_master.url, threaded_master.agent_token, "sim-0", slots=2).start()
    try:
        eid = create(threaded_master, SEARCH)
        wait_for(
            lambda: (
                threaded_master.get(f"/api/v1/experiments/{eid}")["experiment"]["state"]
                == "STATE_COMPLETED"
            ),
            60,
            what="the search to complete",
        )
    finally:
        agent.stop()
    trials = threaded_master.get(f"/api/v1/experiments/{eid}/trials")["trials"]
    logged = requests.post(
        threaded_master.url + "/api/v1/task/logs",
        json={"logs": [{"taskId": trials[0]["taskId"], "log": "epoch 1: <b>done</b>\n"}]},
        headers={"Authorization": f"Bearer {threaded_master.agent_token}"},
        timeout=10,
    )
    assert logged.status_code == 200, logged.text

    login(page, threaded_master)
    row = page.locator("tbody tr", has_text="webui-search")
    assert "COMPLETED" in row.inner_text()
    row.locator("a").first.click()
    page.wait_for_url(f"**/det/experiments/{eid}")
    assert "webui-search" in page.inner_text("h1")
    # One validation curve per trial, with a point per validation (8 steps, every 2).
    page.wait_for_selector("figure.curves[data-ready-ms]")
    lines = page.locator("figure.curves svg polyline")
    assert lines.count() == 2
    for i in range(2):
        assert len(lines.nth(i).get_attribute("points").split()) == 4
    body = page.locator(".trials-box table").inner_text()
    for t in trials:
        assert str(t["id"]) in body
    assert "null" not in page.inner_text("main") and "undefined" not in page.inner_text("main")
    best = threaded_master.get(f"/api/v1/experiments/{eid}")["experiment"]["bestTrialId"]
    assert f"trial {best}" in page.inner_text("dl.facts")

    page.click(f"a[href='/det/trials/{trials[0]['id']}']")
    page.wait_for_url(f"**/det/trials/{trials[0]['id']}")
    assert "COMPLETED" in page.inner_text("h1")
    summary = page.locator("table", has_text="Metric").inner_text()
    assert "validation\tvalidation_loss" in summary and "training\tloss" in summary
    checkpoints = threaded_master.get(f"/api/v1/trials/{trials[0]['id']}/checkpoints")[
        "checkpoints"
    ]
    assert len(checkpoints) == 4
    for c in checkpoints:
        assert c["uuid"] in page.inner_text("body")
    # Log lines are text: the markup in them is shown, not rendered.
    page.wait_for_selector("pre.logs .log-line")
    assert "epoch 1: <b>done</b>" in page.inner_text("pre.logs")
    assert page.locator("pre.logs b").count() == 0
    # Both metric groups are charted; choosing another training metric redraws the chart.
    assert page.locator("section.chart-box").count() == 2
    assert page.locator("figcaption", has_text="validation_loss by batches").count() == 1
    page.select_option("select[aria-label='validation metric']", "batches")
    page.wait_for_selector("figcaption:text('batches by batches')")


def test_pause_activate_and_kill_from_the_experiment_list(
    threaded_master: ThreadedMaster, page: Any
) -> None:
    eid = create(threaded_master, SEARCH)  # no agents: its trials stay queued
    login(page, threaded_master)
    row = page.locator("tbody tr", has_text="webui-search")
    row.get_by_role("button", name="Pause").click()
    row.get_by_role("button", name="Activate").wait_for()
    assert (
        threaded_master.get(f"/api/v1/experiments/{eid}")["experiment"]["state"] == "STATE_PAUSED"
    )
    row.get_by_role("button", name="Activate").click()
    row.get_by_role("button", name="Pause").wait_for()
    assert (
        threaded_master.get(f"/api/v1/experiments/{eid}")["experiment"]["state"] == "STATE_ACTIVE"
    )
    # Kill asks first; dismissing the question changes nothing.
    page.once("dialog", lambda d: d.dismiss())
    row.get_by_role("button", name="Kill").click()
    assert (
        threaded_master.get(f"/api/v1/experiments/{eid}")["experiment"]["state"] == "STATE_ACTIVE"
    )
    page.once("dialog", lambda d: d.accept())
    row.get_by_role("button", name="Kill").click()
    wait_for(
        lambda: (
            threaded_master.get(f"/api/v1/experiments/{eid}")["experiment"]["state"]
            in ("STATE_STOPPING_KILLED", "STATE_CANCELED")
        ),
        20,
        what="the kill",
    )


def test_an_action_the_master_refuses_shows_its_message(
    threaded_master: ThreadedMaster, page: Any
) -> None:
    create(threaded_master, SEARCH)
    login(page, threaded_master, "/det/jobs")
    page.once("dialog", lambda d: d.accept("500"))
    page.get_by_role("button", name="Priority…").click()
    page.wait_for_selector("#error:not([hidden])")
    assert "priority" in page.inner_text("#error")


def test_job_queue_priority_and_cluster_pages(threaded_master: ThreadedMaster, page: Any) -> None:
    agent = SimAgent(
        threaded_master.url,
        threaded_master.agent_token,
        "sim-busy",
        train=lambda m, s, k: (k.wait(60), 0)[1],
    ).start()
    try:
        first = create(threaded_master, SEARCH.replace("webui-search", "first-job"))
        second = create(threaded_master, SEARCH.replace("webui-search", "second-job"))
        login(page, threaded_master, "/det/jobs")
        page.wait_for_selector("tbody tr:has-text('second-job')")
        row = page.locator("tbody tr", has_text="second-job")
        assert "42" in row.inner_text()
        page.once("dialog", lambda d: d.accept("7"))
        row.get_by_role("button", name="Priority…").click()
        page.wait_for_selector("tbody tr:first-child:has-text('second-job')")
        jobs = threaded_master.get("/api/v1/job-queues")["jobs"]
        by_name = {j["name"]: j for j in jobs}
        assert by_name["second-job"]["priority"] == 7
        assert jobs[0]["entityId"] == str(second) and {j["entityId"] for j in jobs} >= {
            str(first),
            str(second),
        }

        page.click("#nav a[data-section=cluster]")
        page.wait_for_url("**/det/cluster")
        agents = page.locator("table").last.inner_text()
        assert "sim-busy" in agents and "1/1" in agents
        assert "default" in page.locator("table").first.inner_text()
    finally:
        agent.stop()


def test_names_from_users_are_text_not_markup(threaded_master: ThreadedMaster, page: Any) -> None:
    evil = '<img src=x onerror="window.pwned=1">'
    eid = create(threaded_master, SEARCH.replace("name: webui-search", f"name: '{evil}'"), False)
    login(page, threaded_master, f"/det/experiments/{eid}")
    assert evil in page.inner_text("h1")
    assert page.locator("main img").count() == 0
    assert page.evaluate("window.pwned") is None


def test_the_app_is_served_with_a_strict_policy(threaded_master: ThreadedMaster, page: Any) -> None:
    r = requests.get(threaded_master.url + "/det/experiments/1", timeout=10)
    assert r.status_code == 200 and "text/html" in r.headers["Content-Type"]
    csp = r.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert r.headers["X-Frame-Options"] == "DENY"
    assert requests.get(threaded_master.url + "/det/static/app.js", timeout=10).status_code == 200
    assert (
        requests.get(threaded_master.url + "/det/static/secrets.txt", timeout=10).status_code == 404
    )
    # the icon browsers ask every site for (a 404 in every log before)
    icon = requests.get(threaded_master.url + "/favicon.ico", timeout=10)
    assert icon.status_code == 200 and icon.headers["Content-Type"].startswith("image/svg+xml")
    assert icon.history and icon.history[0].status_code == 301
    assert (
        requests.get(threaded_master.url + "/", timeout=10, allow_redirects=False)
        .headers["Location"]
        .endswith("/det/")
    )
    # The API stays closed without a token, whatever the WebUI serves.
    assert requests.get(threaded_master.url + "/api/v1/experiments", timeout=10).status_code == 401
    paths = threaded_master.get("/api/v1/openapi.json")["paths"]
    assert "/api/v1/experiments" in paths and not [p for p in paths if p.startswith("/det")]
    page.goto(threaded_master.url + "/det/no/such/page")
    assert page.inner_text("h1") == "Page not found"


def test_the_cluster_page_shows_what_a_priced_pool_costs(
    threaded_master_factory: Any, aws_endpoint: str, pg_url: str, page: Any
) -> None:
    import psycopg

    provider = {
        "type": "aws",
        "region": "us-east-1",
        "image_id": "ami-12c6146b",
        "instance_type": "m5.large",
        "instance_slots": 1,
        "endpoint_url": aws_endpoint,
        "cost": {"prices": {"m5.large": 0.5}, "max_hourly_cost": 2, "monthly_budget": 50},
    }
    m = threaded_master_factory(
        extra={
            "resource_pools": [{"pool_name": "default"}, {"pool_name": "gpu", "provider": provider}]
        }
    )
    with psycopg.connect(pg_url) as conn:  # a machine that ran for two hours this month
        conn.execute(
            "INSERT INTO instances (id, resource_pool, instance_type, market, state, launched_at,"
            " terminated_at) VALUES ('i-1', 'gpu', 'm5.large', 'on_demand', 'terminated',"
            " greatest(now() - interval '2 hours', date_trunc('month', now() AT TIME ZONE 'UTC')"
            " AT TIME ZONE 'UTC'), now())"
        )
    spent = m.get("/api/v1/resource-pools/gpu/cost")["spentThisMonth"]
    assert 0 < spent <= 1.0
    login(page, m, "/det/cluster")
    row = page.locator("tbody tr", has_text="gpu").first
    row.wait_for()
    text = row.inner_text()
    assert "$0.00/h (cap $2.00/h)" in text and f"${spent:.2f} of $50.00" in text
    assert "$" not in page.locator("tbody tr", has_text="default").first.inner_text()


_VISIBILITY = """(state) => {
    Object.defineProperty(document, "visibilityState", { configurable: true, get: () => state });
    Object.defineProperty(document, "hidden", { configurable: true, get: () => state === "hidden" });
    document.dispatchEvent(new Event("visibilitychange"));
}"""


def test_a_hidden_page_stops_polling_and_refreshes_when_shown(
    threaded_master: ThreadedMaster, page: Any
) -> None:
    # An open tab must not keep a serverless master awake (master/webui/poll.js).
    login(page, threaded_master, "/det/jobs")
    calls: list[str] = []
    page.on("request", lambda r: calls.append(r.url) if "/api/v1/" in r.url else None)
    page.wait_for_timeout(6_000)
    assert calls, "a visible page polls"
    page.evaluate(_VISIBILITY, "hidden")
    page.wait_for_timeout(500)
    calls.clear()
    page.wait_for_timeout(12_000)
    assert calls == [], "a hidden page sends nothing"
    page.evaluate(_VISIBILITY, "visible")
    page.wait_for_timeout(2_000)
    assert calls, "shown again, it refreshes at once"
