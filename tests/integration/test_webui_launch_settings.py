# ruff: noqa: F811 (the fixtures imported from webui_support are parameters here)
"""The WebUI starts tasks and keeps the user's settings (issue 27 item 9), in Chromium: a
notebook started from the launcher (pool, slots, image, template, the default workspace) is
followed until ready and opened on the tasks' own origin, where the WebUI's session is out of
reach; a refused launch shows one line and starts nothing; the settings page changes the
password (the current one checked first), keeps the default workspace, and creates, lists and
revokes access tokens. Also GetUserSetting/PostUserSetting on the wire."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import requests

from tests.fakes.sim_agent import SimAgent
from tests.integration.conftest import wait_for
from tests.integration.task_origin_support import FakeTask, serve_from
from tests.integration.threaded import ThreadedMaster, threaded_master
from tests.integration.webui_support import (  # noqa: F401
    browser,
    login,
    module_db,
    page,
    screenshot,
)

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def master(tmp_path_factory: Any, module_db: str) -> Iterator[ThreadedMaster]:
    with threaded_master(tmp_path_factory.mktemp("launch"), module_db, loop=True) as m:
        yield m


def _user(m: ThreadedMaster, name: str, password: str) -> str:
    m.post("/api/v1/users", {"user": {"username": name, "admin": False}, "password": password})
    return m.login(name, password)


def _status(m: ThreadedMaster, path: str, token: str, body: Any = None) -> requests.Response:
    s = m.session(token)
    return (
        s.post(m.url + path, json=body, timeout=30)
        if body is not None
        else s.get(m.url + path, timeout=30)
    )


def test_user_settings_on_the_wire_are_each_users_own(master: ThreadedMaster) -> None:
    m = master
    dora = _user(m, "dora", "Dora-pw-1")
    erin = _user(m, "erin", "Erin-pw-1")
    r = _status(m, "/api/v1/users/setting", dora, {"settings": [
        {"storagePath": "det-webui", "key": "defaultWorkspaceId", "value": "1"},
        {"storagePath": "other", "key": "k", "value": "v"},
    ]})  # fmt: skip
    assert r.status_code == 200, r.text
    got = _status(m, "/api/v1/users/setting", dora).json()["settings"]
    assert got == [
        {"storagePath": "det-webui", "key": "defaultWorkspaceId", "value": "1"},
        {"storagePath": "other", "key": "k", "value": "v"},
    ]
    assert _status(m, "/api/v1/users/setting", erin).json() == {"settings": []}
    # A refused request changes nothing: its first (valid) entry is not kept either.
    for body, message in [
        ({"settings": [{"key": "a", "value": "x"}, {"value": "y"}]},
         "settings[1].key: required non-empty string"),
        ({"settings": [{"key": "a", "value": 3}]}, "settings[0].value: input should be a valid string"),
        ({"settings": [{"key": "k" * 256, "value": "x"}]},
         "settings[0].key: 256 characters, the limit is 255"),
    ]:  # fmt: skip
        bad = _status(m, "/api/v1/users/setting", dora, body)
        assert bad.status_code in (400, 413), bad.text
        assert message in bad.json()["message"], bad.text
    assert len(_status(m, "/api/v1/users/setting", dora).json()["settings"]) == 2
    # An empty value removes the setting (as Determined's master does); reset removes all.
    _status(m, "/api/v1/users/setting", dora, {"settings": [{"storagePath": "other", "key": "k"}]})
    assert [s["key"] for s in _status(m, "/api/v1/users/setting", dora).json()["settings"]] == [
        "defaultWorkspaceId"
    ]
    assert _status(m, "/api/v1/users/setting/reset", dora, {}).status_code == 200
    assert _status(m, "/api/v1/users/setting", dora).json() == {"settings": []}


def _waiting(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
    """A simulated task that runs until it is killed (a notebook's server)."""
    killed.wait()
    return 0


@pytest.mark.browser
def test_a_notebook_started_from_the_webui_opens_on_its_own_origin(
    master: ThreadedMaster, page: Any, tmp_path: Any
) -> None:
    m = master
    fake = FakeTask(page="<!doctype html><title>nb</title><p id=here>the notebook</p>").start()
    agent = SimAgent(m.url, m.agent_token, "sim-launch", slots=2, train=_waiting).start()
    try:
        ws = m.post("/api/v1/workspaces", {"name": "team-launch"})["workspace"]
        m.post(
            "/api/v1/templates/nb-tpl",
            {"name": "nb-tpl", "workspaceId": 1, "config": {"description": "from the template",
                                           "environment": {"environment_variables": ["FROM_TPL=1"]}}},
        )  # fmt: skip
        m.post(
            "/api/v1/users/setting",
            {"settings": [{"storagePath": "det-webui", "key": "defaultWorkspaceId",
                           "value": str(ws["id"])}]},
        )  # fmt: skip
        login(page, m, "/det/tasks")
        page.get_by_role("link", name="Start a task…").click()
        page.wait_for_url("**/det/tasks/new")
        form = page.locator("form.launch-form")
        # The user's default workspace is chosen already.
        assert form.locator("select[name=workspace]").input_value() == str(ws["id"])

        # A refused launch: one line, nothing started.
        form.locator("select[name=kind]").select_option("tensorboard")
        form.locator("input[name=experiments]").fill("999999")
        form.get_by_role("button", name="Start").click()
        error = form.locator(".form-error")
        error.wait_for()
        wait_for(lambda: error.inner_text() != "", 15, what="the launch error")
        assert error.inner_text().startswith("start tensorboard: "), error.inner_text()
        assert "999999" in error.inner_text() and "\n" not in error.inner_text()
        assert m.get("/api/v1/tensorboards")["tensorboards"] == []

        form.locator("select[name=kind]").select_option("notebook")
        form.locator("select[name=pool]").select_option("default")
        form.locator("input[name=slots]").fill("2")
        form.locator("input[name=image]").fill("det-task:py3.11-cpu-torch")
        form.locator("select[name=template]").select_option("nb-tpl")
        form.get_by_role("button", name="Start").click()
        started = page.locator(".launched [data-task]")
        started.wait_for()
        (nb,) = m.get("/api/v1/notebooks")["notebooks"]
        assert nb["workspaceId"] == ws["id"] and nb["resourcePool"] == "default"
        with psycopg.connect(_db_url(m), autocommit=True) as conn:
            row = conn.execute(
                "SELECT config FROM ntsc_tasks WHERE id = %s", (nb["id"],)
            ).fetchone()
        assert row is not None
        config = row[0]
        assert config["resources"]["slots"] == 2
        assert config["environment"]["image"]["cpu"] == "det-task:py3.11-cpu-torch"
        assert "FROM_TPL=1" in config["environment"]["environment_variables"]["cpu"]
        assert config["description"] == "from the template"

        # It runs on the (simulated) agent; its page comes up; then it may be opened.
        wait_for(
            lambda: m.get(f"/api/v1/notebooks/{nb['id']}")["notebook"]["state"] == "STATE_RUNNING",
            60,
            what="the notebook to run",
        )
        assert page.locator(".launched button.open-task").count() == 0  # not ready yet
        serve_from(_db_url(m), nb["id"], fake.port)
        page.locator(".launched button.open-task").wait_for(timeout=30_000)
        screenshot(page, "launch")
        with page.context.expect_page() as opened:
            page.locator(".launched button.open-task").click()
        task_page = opened.value
        task_page.wait_for_selector("#here")
        assert task_page.url.startswith(f"http://{nb['id']}.localhost:"), task_page.url
        # The WebUI's session stays on the WebUI's origin: the task's page sees none of it.
        token = page.evaluate("() => localStorage.getItem('det.token')")
        assert token
        assert task_page.evaluate("() => localStorage.length") == 0
        assert task_page.evaluate("() => window.opener") is None
        assert task_page.evaluate("() => document.cookie") == ""
        assert all(token not in str(s.headers) for s in fake.seen)
        m.post(f"/api/v1/notebooks/{nb['id']}/kill")
    finally:
        agent.stop()
        fake.stop()


def _db_url(m: ThreadedMaster) -> str:
    return m.db_url


@pytest.mark.browser
def test_the_settings_page_changes_the_password_and_manages_tokens(
    master: ThreadedMaster, page: Any
) -> None:
    m = master
    carol_session = _user(m, "carol", "Carol-pw-1")
    carol_id = m.get("/api/v1/me", headers={"Authorization": f"Bearer {carol_session}"})["user"][
        "id"
    ]
    old_token = _status(m, "/api/v1/tokens", carol_session, {"userId": carol_id}).json()["token"]
    ws = m.post("/api/v1/workspaces", {"name": "team-carol"})["workspace"]
    login(page, m, "/det/tasks", user="carol", password="Carol-pw-1")
    page.get_by_role("link", name="carol").click()
    page.wait_for_url("**/det/settings")

    form = page.locator("form.change-password")
    error = form.locator(".form-error")

    def change(current: str, new: str, again: str) -> None:
        form.locator("input[name=current]").fill(current)
        form.locator("input[name=password]").fill(new)
        form.locator("input[name=confirm]").fill(again)
        form.get_by_role("button", name="Change password").click()

    change("Carol-pw-1", "Carol-pw-2", "Carol-pw-3")
    wait_for(lambda: error.inner_text() != "", 15, what="the mismatch error")
    assert error.inner_text() == "confirm: the two new passwords differ"
    change("wrong-pw", "Carol-pw-2", "Carol-pw-2")
    wait_for(lambda: "wrong password" in error.inner_text(), 15, what="the wrong-password error")
    assert m.login("carol", "Carol-pw-1")  # nothing changed
    change("Carol-pw-1", "Carol-pw-2", "Carol-pw-2")
    form.locator(".form-status:has-text('Password changed')").wait_for()
    refused = requests.post(
        m.url + "/api/v1/auth/login",
        json={"username": "carol", "password": "Carol-pw-1"},
        timeout=30,
    )
    assert refused.status_code == 401
    assert m.login("carol", "Carol-pw-2")
    # Every session of carol's ended, her access token too (a token is a session).
    for ended in (carol_session, old_token):
        assert _status(m, "/api/v1/me", ended).status_code == 401
    # The page logged in again with the new password: it still works, no login page.
    page.goto(m.url + "/det/settings")
    page.locator("form.change-password").wait_for()
    assert "/det/login" not in page.url

    # The default workspace, kept in the user's settings.
    page.locator("select[name=defaultWorkspace]").select_option(str(ws["id"]))
    page.locator(".default-workspace .form-status:has-text('Saved: team-carol')").wait_for()
    carol = m.login("carol", "Carol-pw-2")
    saved = m.get("/api/v1/users/setting", headers={"Authorization": f"Bearer {carol}"})
    assert {"storagePath": "det-webui", "key": "defaultWorkspaceId", "value": str(ws["id"])} in (
        saved["settings"]
    )

    # An access token: created (shown once), listed, working, then revoked.
    screenshot(page, "settings")  # before a token is shown: no secret in the docs
    tokens = page.locator("section.tokens")
    tokens.locator("input[name=description]").fill("ci <b>runner</b>")
    tokens.locator("input[name=lifespan]").fill("48h")
    tokens.get_by_role("button", name="Create token").click()
    value = tokens.locator("code.token-value")
    value.wait_for()
    secret = value.inner_text().strip()
    me = requests.get(
        m.url + "/api/v1/me", headers={"Authorization": f"Bearer {secret}"}, timeout=30
    )
    assert me.status_code == 200 and me.json()["user"]["username"] == "carol"
    row = tokens.locator("tbody tr", has_text="ci <b>runner</b>")
    row.wait_for()
    assert tokens.locator("tbody b").count() == 0
    # a lifespan a non-admin may not have: one line, no token
    tokens.locator("input[name=lifespan]").fill("-1")
    tokens.get_by_role("button", name="Create token").click()
    tokens.locator(".form-error:has-text('lifespan')").wait_for()
    listed = m.get("/api/v1/tokens", headers={"Authorization": f"Bearer {carol}"})["tokenInfo"]
    assert len(listed) == 1
    asked: list[str] = []
    page.once("dialog", lambda d: (asked.append(d.message), d.accept()))
    row.get_by_role("button", name="Revoke").click()
    wait_for(lambda: row.count() == 0, 15, what="the revoked token gone from the list")
    assert asked and asked[0].startswith(f"Revoke token {listed[0]['id']}")
    gone = requests.get(
        m.url + "/api/v1/me", headers={"Authorization": f"Bearer {secret}"}, timeout=30
    )
    assert gone.status_code == 401


@pytest.mark.browser
def test_a_tensorboard_over_the_selected_experiments(master: ThreadedMaster, page: Any) -> None:
    from tests.integration.cli_support import create_via_api, sim_config

    m = master
    eids = [create_via_api(m, sim_config(f"webui-tb-{i}", trials=1)) for i in range(2)]
    for eid in eids:
        wait_for(
            lambda eid=eid: len(m.get(f"/api/v1/experiments/{eid}/trials")["trials"]) == 1,
            30,
            what="the trial",
        )
    login(page, m, "/det/experiments?name=webui-tb-")
    for eid in eids:
        page.locator(f'tbody tr[data-id="{eid}"] input.pick').check()
    page.get_by_role("button", name="TensorBoard…").click()
    page.wait_for_url("**/det/tasks/new?kind=tensorboard&experiments=*")
    form = page.locator("form.launch-form")
    assert form.locator("select[name=kind]").input_value() == "tensorboard"
    assert sorted(form.locator("input[name=experiments]").input_value().split(",")) == sorted(
        str(e) for e in eids
    )
    assert form.locator("input[name=entrypoint]").is_hidden()
    form.locator("input[name=description]").fill("tb <i>both</i>")
    form.get_by_role("button", name="Start").click()
    page.locator(".launched [data-task]").wait_for()
    (tb,) = m.get("/api/v1/tensorboards")["tensorboards"]
    assert sorted(tb["experimentIds"]) == sorted(eids)
    assert tb["description"] == "tb <i>both</i>"
    assert page.locator(".launched i").count() == 0
    m.post(f"/api/v1/tensorboards/{tb['id']}/kill")

    # A command: one line (run through /bin/sh -c), its logs linked once started.
    form.locator("select[name=kind]").select_option("command")
    form.locator("input[name=entrypoint]").fill("")
    form.get_by_role("button", name="Start").click()
    form.locator(".form-error:has-text('command: required')").wait_for()
    form.locator("input[name=entrypoint]").fill("pip list && echo done")
    form.get_by_role("button", name="Start").click()
    page.get_by_role("link", name="Follow its logs").wait_for()
    (cmd,) = m.get("/api/v1/commands")["commands"]
    assert m.get(f"/api/v1/commands/{cmd['id']}")["config"]["entrypoint"] == [
        "pip list && echo done"
    ]
    m.post(f"/api/v1/commands/{cmd['id']}/kill")
