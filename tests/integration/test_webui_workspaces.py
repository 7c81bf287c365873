# ruff: noqa: F811 (the fixtures imported from webui_support are parameters here)
"""The WebUI's workspaces and projects in Chromium: create a workspace and a project, the
project's own experiment list and notes, archive and unarchive."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import wait_for
from tests.integration.threaded import ThreadedMaster
from tests.integration.webui_support import browser, login, page, screenshot  # noqa: F401

pytestmark = [pytest.mark.integration, pytest.mark.browser]

CONFIG = """
name: {name}
entrypoint: python3 train.py
searcher: {{name: single, metric: loss, max_length: {{batches: 10}}}}
hyperparameters: {{lr: 0.1}}
"""


def ids_shown(page: Any) -> list[int]:
    return [
        int(x) for x in page.locator("tbody tr").evaluate_all("rs => rs.map(r => r.dataset.id)")
    ]


def test_workspaces_projects_their_experiments_and_notes(
    threaded_master: ThreadedMaster, page: Any
) -> None:
    m = threaded_master
    elsewhere = m.post(
        "/api/v1/experiments", {"config": CONFIG.format(name="elsewhere"), "activate": False}
    )["experiment"]["id"]
    login(page, m, "/det/workspaces")
    page.fill("input[aria-label='new workspace name']", "research")
    page.get_by_role("button", name="Create workspace").click()
    page.wait_for_url("**/det/workspaces/*")
    ws = next(w for w in m.get("/api/v1/workspaces")["workspaces"] if w["name"] == "research")
    assert page.url.endswith(f"/det/workspaces/{ws['id']}")
    page.fill("input[aria-label='new project name']", "vision")
    page.fill("input[aria-label='new project description']", "image <b>models</b>")
    page.get_by_role("button", name="Create project").click()
    page.wait_for_url("**/det/projects/*")
    page.wait_for_selector("h1:has-text('vision')")
    project = m.get(f"/api/v1/workspaces/{ws['id']}/projects")["projects"][0]
    assert project["name"] == "vision" and project["description"] == "image <b>models</b>"
    assert "image <b>models</b>" in page.inner_text("main") and page.locator("main b").count() == 0

    # The project's list shows its experiments only, with the list's filters and actions.
    mine = m.post(
        "/api/v1/experiments",
        {"config": CONFIG.format(name="in-vision"), "activate": False, "projectId": project["id"]},
    )["experiment"]["id"]
    page.reload()
    wait_for(lambda: ids_shown(page) == [mine], 15, what="the project's experiment")
    assert elsewhere not in ids_shown(page)
    page.fill("input[name=name]", "nothing-like-this")
    wait_for(lambda: ids_shown(page) == [], 15, what="the name filter in the project")
    page.fill("input[name=name]", "")
    wait_for(lambda: ids_shown(page) == [mine], 15, what="the project's experiment again")

    # Notes.
    page.fill("input[aria-label='note title']", "Plan")
    page.fill("input[aria-label='note text']", "try a wider lr range")
    page.get_by_role("button", name="Add note").click()
    page.wait_for_selector("details.note summary:text('Plan')")
    notes = m.get(f"/api/v1/projects/{project['id']}")["project"]["notes"]
    assert notes == [{"name": "Plan", "contents": "try a wider lr range"}]
    screenshot(page, "project")

    # The workspace lists the project with its count; archive it there.
    page.get_by_role("link", name="research").click()
    page.wait_for_url(f"**/det/workspaces/{ws['id']}")
    row = page.locator("tbody tr", has_text="vision")
    assert "1" in row.locator("td").nth(3).inner_text()
    row.get_by_role("button", name="Archive", exact=True).click()
    row.get_by_role("button", name="Unarchive").wait_for()
    assert m.get(f"/api/v1/projects/{project['id']}")["project"]["archived"] is True

    # Workspaces: archived ones hidden unless asked.
    page.goto(m.url + "/det/workspaces")
    row = page.locator("tbody tr", has_text="research")
    row.get_by_role("button", name="Archive", exact=True).click()
    wait_for(lambda: page.locator("tbody tr", has_text="research").count() == 0, 15, what="hidden")
    assert m.get(f"/api/v1/workspaces/{ws['id']}")["workspace"]["archived"] is True
    page.check("input[name=archived]")
    page.locator("tbody tr", has_text="research").get_by_role("button", name="Unarchive").click()
    wait_for(
        lambda: m.get(f"/api/v1/workspaces/{ws['id']}")["workspace"]["archived"] is False,
        15,
        what="unarchived",
    )
    # A taken name is refused with the master's message.
    page.fill("input[aria-label='new workspace name']", "research")
    page.get_by_role("button", name="Create workspace").click()
    page.wait_for_selector(".create-workspace .form-error:text-matches('.+')")


def test_a_workspace_page_shows_its_pools_and_defaults(
    threaded_master: ThreadedMaster, page: Any
) -> None:
    m = threaded_master
    pools = [p["name"] for p in m.get("/api/v1/resource-pools")["resourcePools"]]
    assert pools, "the master has no resource pool"
    pool = pools[0]
    bound = m.post("/api/v1/workspaces", {"name": "pinned", "defaultComputePool": pool})
    other = m.post("/api/v1/workspaces", {"name": "unpinned"})
    m.post(
        f"/api/v1/resource-pools/{pool}/workspace-bindings",
        {"workspaceIds": [bound["workspace"]["id"]]},
    )

    login(page, m, "/det/workspaces")

    def shown(workspace_id: int) -> dict[str, str]:
        page.goto(f"{m.url}/det/workspaces/{workspace_id}")
        page.wait_for_selector("dl.facts dt:text('Resource pools')")
        names = page.locator("dl.facts dt").all_inner_texts()
        values = page.locator("dl.facts dd").all_inner_texts()
        return dict(zip(names, values, strict=True))

    mine = shown(bound["workspace"]["id"])
    assert mine["Resource pools"].split(", ")[0] == pool, mine
    assert mine["Default pools"] == f"compute {pool}, aux (the cluster's)", mine
    # A pool bound to one workspace is not another's to use.
    theirs = shown(other["workspace"]["id"])
    assert pool not in theirs["Resource pools"].split(", "), theirs
    assert theirs["Default pools"] == "compute (the cluster's), aux (the cluster's)", theirs
