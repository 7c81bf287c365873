"""det's own ``det rbac`` and ``det user-group`` (issue 40): the official client's verbs and flags
against the master's app in the test's process (``in_process_cli_master``) on real PostgreSQL;
what they change is read back from the API."""

from __future__ import annotations

import json

import pytest

from tests.integration import cli_support
from tests.integration.cli_support import Det

pytestmark = pytest.mark.integration
cli_master = cli_support.in_process_cli_master
det = cli_support.det


def test_groups_and_roles_with_dets_own_cli(det: Det) -> None:
    m = det.master
    for name in ("ann", "ben"):
        m.post("/api/v1/users", {"user": {"username": name, "active": True},
                                 "password": f"{name}-Pw-12345"})  # fmt: skip
    det.login()
    det.ok("workspace", "create", "crew-ws")
    det.ok("user-group", "create", "crew", "--add-user", "ann")
    det.ok("user-group", "add-user", "crew", "ben")
    described = json.loads(det.ok("user-group", "describe", "crew", "--json").out)
    assert sorted(u["username"] for u in described["users"]) == ["ann", "ben"]
    assert "crew" in det.ok("user-group", "list", "--groups-user-belongs-to", "ben").out

    out = det.ok("rbac", "assign-role", "Editor", "--group-name-to-assign", "crew",
                 "--workspace-name", "crew-ws").out  # fmt: skip
    assert out.strip() == "assigned role 'Editor' to group 'crew' on workspace 'crew-ws'"
    det.ok("rbac", "assign-role", "Viewer", "--username-to-assign", "ann")  # on the cluster
    roles = json.loads(det.ok("rbac", "list-users-roles", "ann", "--json").out)["roles"]
    held = sorted(
        (r["role"]["name"], a["roleAssignment"].get("scopeWorkspaceId"))
        for r in roles
        for a in [*(r.get("userRoleAssignments") or []), *(r.get("groupRoleAssignments") or [])]
    )
    ws = m.get("/api/v1/workspaces", params={"name": "crew-ws"})["workspaces"][0]["id"]
    assert held == [("Editor", ws), ("Viewer", None)]
    assert "crew-ws" in det.ok("rbac", "list-groups-roles", "crew").out
    listed = det.ok("rbac", "list-roles").out
    assert all(name in listed for name in ("Viewer", "Editor", "WorkspaceAdmin", "ClusterAdmin"))
    assert "experiment.update" in det.ok("rbac", "describe-role", "Editor").out

    # Ann's own view; a refusal is one line.
    det.ok("user", "login", "ann", stdin="ann-Pw-12345\n")
    mine = det.ok("rbac", "my-permissions").out
    assert "Editor" in mine and "crew-ws" in mine and "(cluster)" in mine, mine
    r = det("user-group", "create", "anns")
    assert r.rc != 0 and len(r.err.strip().splitlines()) == 1, r.err
    assert "needs the ClusterAdmin role on the cluster" in r.err

    det.login()
    det.ok("rbac", "unassign-role", "Editor", "--group-name-to-assign", "crew",
           "--workspace-name", "crew-ws")  # fmt: skip
    det.ok("user-group", "remove-user", "crew", "ben")
    det.ok("user-group", "change-name", "crew", "crew2")
    det.ok("user-group", "delete", "crew2", "--yes")
    assert m.post("/api/v1/groups/search", {"limit": 10}).get("groups") in (None, [])
    r = det("rbac", "assign-role", "Editor", "--username-to-assign", "ann",
            "--group-name-to-assign", "crew")  # fmt: skip
    assert r.rc != 0 and "exactly one of --username-to-assign" in r.err
