# ruff: noqa: F811 (the fixtures imported from webui_support are parameters here)
"""The WebUI's trial page and model registry in Chromium against a live master with a finished
adaptive ASHA search: following a running trial's log and filtering it (level, rank, agent, text),
jumping to its start and end, downloading it; registering a checkpoint as a model version and
finding it on the model's pages; notes, metadata, archive and creating a model."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.sim_agent import SimAgent
from tests.integration.conftest import wait_for
from tests.integration.threaded import ThreadedMaster
from tests.integration.webui_support import (  # noqa: F401 (fixtures)
    browser,
    create,
    login,
    module_db,
    page,
    post_logs,
    screenshot,
    search,
)

pytestmark = [pytest.mark.integration, pytest.mark.browser]

SINGLE = """
name: live-logs
entrypoint: python3 train.py
searcher: {name: single, metric: validation_loss, max_length: {batches: 8}}
hyperparameters: {lr: 0.5}
max_restarts: 0
"""


def shown_lines(page: Any) -> list[str]:
    return [x.rstrip("\n") for x in page.locator("pre.logs .log-line").all_inner_texts()]


def test_following_a_running_trials_log_with_level_rank_agent_and_text_filters(
    search: tuple[ThreadedMaster, int], page: Any, tmp_path: Path
) -> None:
    m, _ = search
    release = threading.Event()

    def wait_until_released(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        while not (release.is_set() or killed.is_set()):
            killed.wait(0.1)
        return 0

    agent = SimAgent(m.url, m.agent_token, "sim-logs", train=wait_until_released).start()
    try:
        eid = create(m, SINGLE)
        trial = wait_for(
            lambda: next(
                (
                    t
                    for t in m.get(f"/api/v1/experiments/{eid}/trials")["trials"]
                    if t["state"] == "STATE_RUNNING"
                ),
                None,
            ),
            30,
            what="the trial to run",
        )
        task = trial["taskId"]
        post_logs(
            m,
            task,
            [
                {"log": "first line\n", "rankId": 0, "agentId": "node-a"},
                {"log": "loading data\n", "level": "LOG_LEVEL_DEBUG", "rankId": 0},
                {"log": "disk almost full\n", "level": "LOG_LEVEL_WARNING", "rankId": 1},
                {
                    "log": "step 1 failed: needle\n",
                    "level": "LOG_LEVEL_ERROR",
                    "rankId": 1,
                    "agentId": "node-b",
                },
                {"log": "epoch 1 <b>done</b>\n", "level": "LOG_LEVEL_INFO", "agentId": "node-b"},
            ],
        )
        login(page, m, f"/det/trials/{trial['id']}")
        page.wait_for_selector(".log-status:text('following…')")
        assert page.locator("input[name=follow]").is_checked()
        wait_for(lambda: len(shown_lines(page)) == 5, 15, what="the five lines")
        assert shown_lines(page)[0].endswith("first line")
        assert "[node-b] [rank=1] ERROR    step 1 failed: needle" in shown_lines(page)[3]
        assert page.locator("pre.logs b").count() == 0  # text, not markup

        # Following: a line written now shows up without a reload.
        post_logs(m, task, [{"log": "fresh line 42\n", "rankId": 0}])
        wait_for(lambda: shown_lines(page)[-1].endswith("fresh line 42"), 15, what="a new line")
        screenshot(page, "trial-logs")

        # Level: only errors and worse, and so the lines that come later.
        for level in ("DEBUG", "INFO", "WARNING"):
            page.locator(f"input[name=level][value={level}]").uncheck()
        wait_for(lambda: len(shown_lines(page)) == 1, 15, what="the level filter")
        assert shown_lines(page)[0].endswith("step 1 failed: needle")
        page.wait_for_selector(".log-status:text('following…')")
        post_logs(
            m,
            task,
            [
                {"log": "quiet info\n", "rankId": 0},
                {"log": "loud failure\n", "level": "LOG_LEVEL_CRITICAL", "rankId": 0},
            ],
        )
        wait_for(lambda: len(shown_lines(page)) == 2, 15, what="the critical line")
        assert shown_lines(page)[-1].endswith("loud failure")
        assert not any("quiet info" in x for x in shown_lines(page))
        for level in ("DEBUG", "INFO", "WARNING"):
            page.locator(f"input[name=level][value={level}]").check()
        wait_for(lambda: len(shown_lines(page)) == 8, 15, what="every level again")

        # Rank and text.
        page.fill("input[name=rank]", "1")
        wait_for(lambda: len(shown_lines(page)) == 2, 15, what="the rank filter")
        assert all("[rank=1]" in x for x in shown_lines(page))
        page.fill("input[name=rank]", "")
        page.fill("input[name=search]", "needle")
        wait_for(lambda: len(shown_lines(page)) == 1, 15, what="the text filter")
        page.check("input[name=regex]")
        page.fill("input[name=search]", "^(first|fresh) line")
        wait_for(lambda: len(shown_lines(page)) == 2, 15, what="the regex filter")
        page.uncheck("input[name=regex]")
        page.fill("input[name=search]", "")
        wait_for(lambda: len(shown_lines(page)) == 8, 15, what="no filter")

        # Agent: the lines that agent shipped (two agents or one), with rank too.
        page.fill("input[name=agent]", "node-b")
        wait_for(lambda: len(shown_lines(page)) == 2, 15, what="the agent filter")
        assert all("[node-b]" in x for x in shown_lines(page))
        page.fill("input[name=agent]", "node-a, node-b")
        wait_for(lambda: len(shown_lines(page)) == 3, 15, what="two agents")
        page.fill("input[name=rank]", "1")
        wait_for(lambda: len(shown_lines(page)) == 1, 15, what="agent and rank")
        assert shown_lines(page)[0].endswith("step 1 failed: needle")
        page.fill("input[name=agent]", "node-c")
        page.wait_for_selector("pre.logs .empty:text('No log lines match the filters.')")
        page.fill("input[name=agent]", "")
        page.fill("input[name=rank]", "")
        wait_for(lambda: len(shown_lines(page)) == 8, 15, what="no filter again")

        # Start stops following and shows the oldest lines; End follows again.
        page.get_by_role("button", name="Start").click()
        page.wait_for_selector(".log-status:text('8 lines')")
        assert not page.locator("input[name=follow]").is_checked()
        assert page.locator("pre.logs").evaluate("e => e.scrollTop") == 0
        page.get_by_role("button", name="End").click()
        page.wait_for_selector(".log-status:text('8 lines')")
        page.check("input[name=follow]")
        page.wait_for_selector(".log-status:text('following…')")

        # Download: every line that matches the filters, as text.
        page.locator("input[name=level][value=DEBUG]").uncheck()
        wait_for(lambda: len(shown_lines(page)) == 7, 15, what="no debug")
        with page.expect_download() as dl:
            page.get_by_role("button", name="Download").click()
        path = tmp_path / "logs.txt"
        dl.value.save_as(path)
        text = path.read_text().splitlines()
        assert len(text) == 7 and text[0].endswith("first line")
        assert not any("loading data" in x for x in text)

        # A filter the master refuses shows its message; fixing it clears it.
        page.fill("input[name=rank]", "first")
        page.wait_for_selector("#error:not([hidden])")
        assert "rankIds" in page.inner_text("#error")
        page.fill("input[name=rank]", "")
        page.wait_for_selector("#error[hidden]", state="attached")
        wait_for(lambda: len(shown_lines(page)) == 7, 15, what="the lines again")

        # The trial ends: the stream says so.
        release.set()
        page.wait_for_selector(".log-status:text('the trial has ended')", timeout=30_000)
    finally:
        release.set()
        agent.stop()


def test_registering_a_checkpoint_and_the_model_pages(
    search: tuple[ThreadedMaster, int], page: Any
) -> None:
    m, eid = search
    # Two checkpoints the search kept (its GC may have deleted others).
    done = [
        (t["id"], c["uuid"])
        for t in m.get(f"/api/v1/experiments/{eid}/trials")["trials"]
        for c in m.get(f"/api/v1/trials/{t['id']}/checkpoints")["checkpoints"]
        if c["state"] == "STATE_COMPLETED"
    ]
    (best, last), (other, first) = done[0], done[-1]
    login(page, m, f"/det/trials/{best}")
    row = page.locator(f"tr[data-uuid='{last}']")
    row.get_by_role("button", name="Register as model version…").click()
    form = page.locator("form.register")
    form.locator("input[name=newModel]").fill("asha-best")
    form.locator("input[name=name]").fill("best of the search")
    form.locator("input[name=comment]").fill("lowest validation loss")
    screenshot(page, "trial-register")
    form.get_by_role("button", name="Register").click()
    page.get_by_role("link", name="asha-best version 1").click()
    page.wait_for_url("**/det/models/asha-best/versions/1")
    page.wait_for_selector("h1:has-text('version 1')")
    assert last in page.inner_text("main")
    assert f"trial {best}" in page.inner_text("main")
    version = m.get("/api/v1/models/asha-best/versions/1")["modelVersion"]
    assert version["checkpoint"]["uuid"] == last and version["name"] == "best of the search"
    assert version["comment"] == "lowest validation loss"
    # The version's own notes and metadata.
    page.fill("textarea[name=notes]", "exported to ONNX")
    page.get_by_role("button", name="Save notes").click()
    page.wait_for_selector(".saved:text('Saved.')")
    page.fill("input[name=key]", "stage")
    page.fill("input[name=value]", "production")
    page.get_by_role("button", name="Set").click()
    page.wait_for_selector("td:text('production')")
    version = m.get("/api/v1/models/asha-best/versions/1")["modelVersion"]
    assert version["notes"] == "exported to ONNX" and version["metadata"] == {"stage": "production"}
    page.get_by_role("button", name="Remove").click()
    page.wait_for_selector(".metadata p:text('No metadata.')")
    assert m.get("/api/v1/models/asha-best/versions/1")["modelVersion"]["metadata"] == {}

    # A second version into the same model, chosen from the list.
    page.goto(f"{m.url}/det/trials/{other}")
    page.locator(f"tr[data-uuid='{first}']").get_by_role(
        "button", name="Register as model version…"
    ).click()
    page.locator("form.register select[name=model] option[value=asha-best]").wait_for(
        state="attached"
    )
    page.select_option("form.register select[name=model]", "asha-best")
    page.locator("form.register").get_by_role("button", name="Register").click()
    page.get_by_role("link", name="asha-best version 2").wait_for()

    # The model's page: both versions with their checkpoints; notes and metadata saved.
    page.goto(f"{m.url}/det/models/asha-best")
    page.wait_for_selector("h1:has-text('asha-best')")
    versions = page.locator("table").first.inner_text()
    assert first in versions and last in versions and "best of the search" in versions
    page.fill("textarea[name=notes]", "Use version 1 for the demo.")
    page.get_by_role("button", name="Save notes").click()
    page.wait_for_selector(".saved:text('Saved.')")
    assert m.get("/api/v1/models/asha-best")["model"]["notes"] == "Use version 1 for the demo."
    page.fill("input[name=key]", "owner")
    page.fill("input[name=value]", "team-a")
    page.get_by_role("button", name="Set").click()
    page.wait_for_selector("td:text('team-a')")
    assert m.get("/api/v1/models/asha-best")["model"]["metadata"] == {"owner": "team-a"}
    page.once("dialog", lambda d: d.accept("searches, demo"))
    page.get_by_role("button", name="Edit labels…").click()
    wait_for(
        lambda: m.get("/api/v1/models/asha-best")["model"]["labels"] == ["searches", "demo"],
        15,
        what="the labels",
    )
    screenshot(page, "model")
    page.get_by_role("button", name="Archive", exact=True).click()
    page.wait_for_selector("h1 .state-ARCHIVED")
    assert m.get("/api/v1/models/asha-best")["model"]["archived"] is True

    # The list hides archived models unless asked; a model can be created there.
    page.goto(f"{m.url}/det/models")
    page.fill("input[aria-label='new model name']", "hand-made")
    page.fill("input[aria-label='new model description']", "made in the browser")
    page.get_by_role("button", name="Create model").click()
    page.wait_for_url("**/det/models/hand-made")
    assert m.get("/api/v1/models/hand-made")["model"]["description"] == "made in the browser"
    page.goto(f"{m.url}/det/models")
    page.wait_for_selector("td a:text-is('hand-made')")
    assert page.locator("td a:text-is('asha-best')").count() == 0
    page.check("input[name=archived]")
    page.wait_for_selector("td a:text-is('asha-best')")
    # A name taken is refused with the master's message, and nothing changes.
    page.fill("input[aria-label='new model name']", "hand-made")
    page.get_by_role("button", name="Create model").click()
    page.wait_for_selector(".create-model .form-error:text-matches('.+')")
    assert len(m.get("/api/v1/models")["models"]) == 2


def test_deleting_a_model_a_version_and_a_checkpoint(
    search: tuple[ThreadedMaster, int], page: Any, browser: Any
) -> None:
    m, eid = search
    trial_of = {
        c["uuid"]: t["id"]
        for t in m.get(f"/api/v1/experiments/{eid}/trials")["trials"]
        for c in m.get(f"/api/v1/trials/{t['id']}/checkpoints")["checkpoints"]
        if c["state"] == "STATE_COMPLETED"
    }
    registered = {
        v["checkpoint"]["uuid"]
        for model in m.get("/api/v1/models?limit=100")["models"]
        for v in m.get(f"/api/v1/models/{model['name']}/versions")["modelVersions"]
    }
    free = [u for u in trial_of if u not in registered]
    assert len(free) >= 2
    kept, other = free[0], free[1]
    m.post("/api/v1/users", {"user": {"username": "dave", "active": True}, "password": "Dave-pw-1"})
    m.post("/api/v1/models", {"name": "doomed"})
    for uid in (kept, other):
        m.post("/api/v1/models/doomed/versions", {"modelName": "doomed", "checkpointUuid": uid})

    def state_of(uid: str) -> str:
        return str(m.get(f"/api/v1/checkpoints/{uid}")["checkpoint"]["state"])

    # Dave is not the owner: each delete is asked once, refused with the master's message (the
    # same his own API call gets), and nothing changes.
    context = browser.new_context()
    try:
        dave = context.new_page()
        dave.set_default_timeout(15_000)
        dave_asked: list[str] = []
        dave.on("dialog", lambda d: (dave_asked.append(d.message), d.accept()))
        login(dave, m, "/det/models/doomed", user="dave", password="Dave-pw-1")
        as_dave = m.session(m.login("dave", "Dave-pw-1"))
        refusals = [
            (
                "/det/models/doomed",
                "Delete model…",
                ("DELETE", "/api/v1/models/doomed", None),
            ),
            (
                "/det/models/doomed/versions/1",
                "Delete version…",
                ("DELETE", "/api/v1/models/doomed/versions/1", None),
            ),
            (
                f"/det/trials/{trial_of[other]}",
                None,
                ("DELETE", "/api/v1/checkpoints", {"checkpointUuids": [other]}),
            ),
        ]
        for path, button, (method, api_path, body) in refusals:
            dave.goto(m.url + path)
            if button:
                dave.get_by_role("button", name=button).click()
            else:
                dave.locator(f"tr[data-uuid='{other}']").get_by_role(
                    "button", name="Delete…"
                ).click()
            dave.wait_for_selector("#error:not([hidden])")
            r = as_dave.request(method, m.url + api_path, json=body, timeout=10)
            assert r.status_code == 403, r.text
            assert r.json()["message"] in dave.inner_text("#error")
            dave.evaluate("document.getElementById('error').hidden = true")
        assert len(dave_asked) == 3
        assert "Delete model doomed and its 2 versions?" in dave_asked[0]
        assert len(m.get("/api/v1/models/doomed/versions")["modelVersions"]) == 2
        assert state_of(other) == "STATE_COMPLETED"
    finally:
        context.close()

    # The owner (an admin here). A question answered no changes nothing.
    answer = {"accept": False}
    asked: list[str] = []
    page.on(
        "dialog",
        lambda d: (asked.append(d.message), d.accept() if answer["accept"] else d.dismiss()),
    )
    login(page, m, f"/det/trials/{trial_of[kept]}")
    row = page.locator(f"tr[data-uuid='{kept}']")
    row.get_by_role("button", name="Delete…").click()
    wait_for(lambda: len(asked) == 1, 15, what="the question")
    assert kept in asked[0]
    answer["accept"] = True
    # A registered checkpoint is kept: the master's reason is shown.
    row.get_by_role("button", name="Delete…").click()
    page.wait_for_selector("#error:not([hidden])")
    assert "registered as a model version" in page.inner_text("#error")
    assert state_of(kept) == "STATE_COMPLETED"

    # A version, then the model (and with it the version that held the checkpoint).
    page.goto(f"{m.url}/det/models/doomed/versions/2")
    page.get_by_role("button", name="Delete version…").click()
    page.wait_for_url("**/det/models/doomed")
    page.wait_for_selector("h1:has-text('doomed')")
    assert [v["version"] for v in m.get("/api/v1/models/doomed/versions")["modelVersions"]] == [1]
    assert page.locator("a:text-is('Version 2')").count() == 0
    page.get_by_role("button", name="Delete model…").click()
    page.wait_for_url("**/det/models")
    assert m.session().get(m.url + "/api/v1/models/doomed", timeout=10).status_code == 404
    assert "Delete model doomed and its 1 version?" in asked[-1]

    # Now free, the checkpoint is deleted: its experiment's GC task removes it once an agent
    # runs the task.
    page.goto(f"{m.url}/det/trials/{trial_of[kept]}")
    row.get_by_role("button", name="Delete…").click()
    row.locator(".deleting").wait_for()
    assert len(asked) == 5
    agent = SimAgent(m.url, m.agent_token, "sim-gc").start()
    try:
        wait_for(lambda: state_of(kept) == "STATE_DELETED", 60, what="the checkpoint GC")
    finally:
        agent.stop()
    page.reload()
    row.locator("td:text-is('DELETED')").wait_for()
    assert row.get_by_role("button", name="Delete…").count() == 0
