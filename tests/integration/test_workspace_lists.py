"""GetWorkspaces and GetWorkspaceProjects: the filters, sort and order Determined's clients send
(archived, users, userIds, name, nameCaseSensitive, sortBy, orderBy, offset/limit), on the
master's app in this process (``api_master``) and a real PostgreSQL."""

from __future__ import annotations

from typing import Any

from tests.integration.inproc import InProcessMaster


def _names(m: InProcessMaster, path: str, key: str, **params: Any) -> list[str]:
    return [row["name"] for row in m.get(path, params=params)[key]]


def test_workspace_list_filters_sorts_and_pages(api_master: InProcessMaster) -> None:
    m = api_master
    m.post("/api/v1/users", {"user": {"username": "lister"}, "password": "lister-pw-123"})
    lister = m.get("/api/v1/users")["users"]
    lister_id = next(u["id"] for u in lister if u["username"] == "lister")
    token = m.login("lister", "lister-pw-123")
    r = m.session(token).post(f"{m.url}/api/v1/workspaces", json={"name": "ws-b"}, timeout=30)
    assert r.status_code == 200, r.text
    m.post("/api/v1/workspaces", {"name": "ws-a"})
    old = m.post("/api/v1/workspaces", {"name": "ws-c"})["workspace"]
    m.post(f"/api/v1/workspaces/{old['id']}/archive")

    ws = "/api/v1/workspaces"
    by_name = {"sortBy": "SORT_BY_NAME"}
    assert _names(m, ws, "workspaces", **by_name) == ["Uncategorized", "ws-a", "ws-b", "ws-c"]
    assert _names(m, ws, "workspaces", orderBy="ORDER_BY_DESC", **by_name)[0] == "ws-c"
    assert _names(m, ws, "workspaces", archived="true") == ["ws-c"]
    assert "ws-c" not in _names(m, ws, "workspaces", archived="false")
    assert _names(m, ws, "workspaces", users="lister") == ["ws-b"]
    assert _names(m, ws, "workspaces", userIds=lister_id) == ["ws-b"]
    assert _names(m, ws, "workspaces", name="WS-B") == ["ws-b"]  # any case
    assert _names(m, ws, "workspaces", nameCaseSensitive="WS-B") == []
    assert _names(m, ws, "workspaces", nameCaseSensitive="ws-b") == ["ws-b"]
    page = m.get(ws, params={"offset": 1, "limit": 2, **by_name})
    assert [w["name"] for w in page["workspaces"]] == ["ws-a", "ws-b"]
    assert page["pagination"]["total"] == 4


def test_project_list_filters_sorts_and_pages(api_master: InProcessMaster) -> None:
    m = api_master
    wid = m.post("/api/v1/workspaces", {"name": "team"})["workspace"]["id"]
    path = f"/api/v1/workspaces/{wid}/projects"
    for name in ("p-b", "p-a", "p-c"):
        m.post(path, {"name": name, "workspaceId": wid})
    pc = next(p for p in m.get(path)["projects"] if p["name"] == "p-c")
    m.post(f"/api/v1/projects/{pc['id']}/archive")

    by_name = {"sortBy": "SORT_BY_NAME"}
    assert _names(m, path, "projects", **by_name) == ["p-a", "p-b", "p-c"]
    assert _names(m, path, "projects", orderBy="ORDER_BY_DESC", **by_name) == [
        "p-c",
        "p-b",
        "p-a",
    ]
    assert _names(m, path, "projects", archived="true") == ["p-c"]
    assert _names(m, path, "projects", archived="false", **by_name) == ["p-a", "p-b"]
    assert _names(m, path, "projects", name="p-b") == ["p-b"]
    assert _names(m, path, "projects", users="nobody-here") == []
    assert _names(m, path, "projects", userIds=1, **by_name) == ["p-a", "p-b", "p-c"]
    # Workspace 0: every workspace's projects.
    assert "Uncategorized" in _names(m, "/api/v1/workspaces/0/projects", "projects")
    page = m.get(path, params={"offset": 2, "limit": 1, **by_name})
    assert [p["name"] for p in page["projects"]] == ["p-c"]
    assert page["pagination"]["total"] == 3
