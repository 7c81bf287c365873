# ruff: noqa: F811 (the fixtures imported from webui_support are parameters here)
"""The WebUI's tasks page in Chromium: a queued command listed with its state, its log followed,
killed after one question, and shown again among the ended tasks."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import wait_for
from tests.integration.threaded import ThreadedMaster
from tests.integration.webui_support import (  # noqa: F401
    browser,
    login,
    page,
    post_logs,
    screenshot,
)

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def test_a_command_listed_its_log_followed_and_killed(
    threaded_master: ThreadedMaster, page: Any
) -> None:
    m = threaded_master
    cmd = m.post(
        "/api/v1/commands",
        {"config": {"entrypoint": ["sleep", "300"], "description": "webui <i>cmd</i>"}},
    )["command"]
    login(page, m, "/det/tasks")
    row = page.locator(".tasks-commands tbody tr", has=page.locator(f"[data-task='{cmd['id']}']"))
    row.wait_for()
    text = row.inner_text()
    assert "webui <i>cmd</i>" in text and "admin" in text and page.locator("tbody i").count() == 0
    assert stateof(m, cmd["id"]) in text

    # Its log, followed while the task lives (no agent: it waits in the queue).
    post_logs(m, cmd["id"], [{"log": "waiting for a slot\n"}])
    row.get_by_role("link", name="Logs").click()
    page.wait_for_url(f"**/det/tasks/{cmd['id']}/logs")
    page.wait_for_selector(".log-status:text('following…')")
    page.wait_for_selector("pre.logs .log-line:has-text('waiting for a slot')")
    post_logs(m, cmd["id"], [{"log": "still waiting\n", "level": "LOG_LEVEL_WARNING"}])
    page.wait_for_selector("pre.logs .log-line:has-text('still waiting')")
    screenshot(page, "task-logs")

    # Killed after one question; then among the ended tasks only.
    page.goto(m.url + "/det/tasks")
    asked: list[str] = []
    page.once("dialog", lambda d: (asked.append(d.message), d.accept()))
    row.get_by_role("button", name="Kill").click()
    wait_for(lambda: stateof(m, cmd["id"]) == "TERMINATED", 30, what="the command killed")
    assert asked == ["Kill command webui <i>cmd</i>?"]
    wait_for(lambda: row.count() == 0, 15, what="the ended command hidden")
    page.check("input[name=ended]")
    row.wait_for()
    assert "TERMINATED" in row.inner_text()
    assert row.get_by_role("button", name="Kill").count() == 0


def stateof(m: ThreadedMaster, command_id: str) -> str:
    return str(m.get(f"/api/v1/commands/{command_id}")["command"]["state"]).removeprefix("STATE_")


def test_tensorboard_started_from_an_experiment_is_listed_and_killed(
    threaded_master: ThreadedMaster, page: Any
) -> None:
    from tests.integration.cli_support import create_via_api, sim_config

    m = threaded_master
    eid = create_via_api(m, sim_config("webui-tb", trials=1))
    wait_for(
        lambda: len(m.get(f"/api/v1/experiments/{eid}/trials")["trials"]) == 1,
        30,
        what="the trial",
    )
    login(page, m, f"/det/experiments/{eid}")
    page.get_by_role("button", name="TensorBoard").first.click()
    page.wait_for_url("**/det/tasks")
    (tb,) = m.get("/api/v1/tensorboards")["tensorboards"]
    assert tb["experimentIds"] == [eid]
    row = page.locator(
        ".tasks-tensorboards tbody tr", has=page.locator(f"[data-task='{tb['id']}']")
    )
    row.wait_for()
    assert "admin" in row.inner_text() and "QUEUED" in row.inner_text()  # no agent here
    assert row.get_by_role("button", name="Open").count() == 0  # only once it runs
    page.once("dialog", lambda d: d.accept())
    row.get_by_role("button", name="Kill").click()
    wait_for(
        lambda: (
            m.get(f"/api/v1/tensorboards/{tb['id']}")["tensorboard"]["state"] == "STATE_TERMINATED"
        ),
        30,
        what="the TensorBoard killed",
    )
