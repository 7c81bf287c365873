"""The official 0.38.1 client's ``det user-group`` and ``det rbac`` against det's roles (issue 40),
and the team story end to end with it: an admin makes a group, gives it Editor on a workspace; a
colleague in the group kills another member's runaway experiment with ``det e kill``; a user
outside the workspace is refused its experiment, project and pool with one line each naming the
workspace and the role needed. A live master on real PostgreSQL (the official CLI is another
process)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from det.master import authz
from tests.compat.official import ensure_official_venv
from tests.integration.cli_support import wait_state
from tests.integration.conftest import ADMIN_PASSWORD, wait_for
from tests.integration.test_official_client_answers import Official
from tests.integration.threaded import ThreadedMaster

pytestmark = pytest.mark.integration

CONFIG = "name: runaway\nentrypoint: x\nsearcher: {name: single, metric: loss, max_length: 10}\n"


def _user(m: ThreadedMaster, name: str) -> str:
    pw = f"{name}-Pw-12345"
    m.post("/api/v1/users", {"user": {"username": name, "active": True}, "password": pw})
    return pw


def _det(m: ThreadedMaster, home: Path, user: str, password: str) -> Official:
    home.mkdir()
    o = Official(ensure_official_venv(), m, home)
    o("user", "login", user, stdin=password + "\n")
    return o


def _one_line_refusal(o: Official, *args: str) -> str:
    r = o.run(*args)
    assert r.returncode != 0, (args, r.stdout)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_a_group_with_editor_stops_a_members_runaway_experiment_and_outsiders_are_refused(
    threaded_master: ThreadedMaster, tmp_path: Path
) -> None:
    m = threaded_master
    pw = {name: _user(m, name) for name in ("alice", "bob", "carol")}
    admin = _det(m, tmp_path / "admin", "admin", ADMIN_PASSWORD)
    admin("workspace", "create", "team-ws")
    admin("project", "create", "team-ws", "team-proj")
    admin("user-group", "create", "team-a", "--add-user", "alice")
    admin("user-group", "add-user", "team-a", "bob")
    assert "bob" in admin("user-group", "describe", "team-a")
    assert "team-a" in admin("user-group", "list")
    admin("rbac", "assign-role", "Editor", "--group-name-to-assign", "team-a",
          "--workspace-name", "team-ws")  # fmt: skip
    members = admin("workspace", "list-members", "team-ws")
    assert "team-a" in members and "Editor" in members, members
    roles = admin("rbac", "list-roles")
    assert all(f"role '{r.value}'" in roles for r in authz.Role), roles
    assert "Editor" in admin("rbac", "list-users-roles", "bob")
    assert "PERMISSION_TYPE_UPDATE_EXPERIMENT" in admin("rbac", "describe-role", "Editor")

    # Alice's runaway experiment in the team's project (queued: no agent).
    ws = m.get("/api/v1/workspaces", params={"name": "team-ws"})["workspaces"][0]["id"]
    proj = m.get(f"/api/v1/workspaces/{ws}/projects")["projects"][0]["id"]
    alice = m.session(m.login("alice", pw["alice"]))
    r = alice.post(m.url + "/api/v1/experiments",
                   json={"config": CONFIG, "projectId": proj, "activate": True}, timeout=30)  # fmt: skip
    assert r.status_code == 200, r.text
    eid = int(r.json()["experiment"]["id"])

    bob = _det(m, tmp_path / "bob", "bob", pw["bob"])
    mine = bob("rbac", "my-permissions")
    assert "permissions assigned over workspace 'team-ws'" in mine, mine
    assert "PERMISSION_TYPE_UPDATE_EXPERIMENT" in mine, mine
    carol = _det(m, tmp_path / "carol", "carol", pw["carol"])
    # Carol is outside the workspace: its experiment, its project and its pool are not hers.
    line = _one_line_refusal(carol, "experiment", "kill", str(eid))
    assert f"experiment {eid} is in workspace 'team-ws'" in line and "Editor role" in line, line
    line = _one_line_refusal(carol, "project", "describe", "team-ws", "team-proj")
    assert "team-ws" in line, line
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG + "workspace: team-ws\nproject: team-proj\n")
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "train.py").write_text("print('x')\n")
    line = _one_line_refusal(carol, "experiment", "create", str(cfg), str(ctx))
    assert "workspace 'team-ws': creating an experiment in it needs the Editor role" in line, line
    # A TensorBoard of it would read its metrics and checkpoint storage.
    wait_for(lambda: m.get(f"/api/v1/experiments/{eid}/trials")["trials"], 60, "its trial")
    r = m.session(m.login("carol", pw["carol"])).post(
        m.url + "/api/v1/tensorboards",
        json={"experimentIds": [eid], "config": {"resources": {"slots": 0}}},
        timeout=30,
    )
    assert r.status_code == 403 and "'team-ws'" in r.json()["message"], r.text
    tid = m.get(f"/api/v1/experiments/{eid}/trials")["trials"][0]["id"]
    carols = m.session(m.login("carol", pw["carol"]))
    for path in (f"/api/v1/trials/{tid}", f"/api/v1/trials/{tid}/checkpoints",
                 f"/api/v1/trials/{tid}/logs",
                 f"/api/v1/trials/{tid}/metrics", f"/api/v1/trials/{tid}/workloads",
                 f"/api/v1/trials/metrics/training_metrics?trialIds={tid}",
                 f"/api/v1/trials/time-series?trialIds={tid}&metricNames=loss"):  # fmt: skip
        r = carols.get(m.url + path, timeout=30)
        assert r.status_code == 403 and f"trial {tid} is in workspace 'team-ws'" in r.text, (
            path, r.text)  # fmt: skip
    assert carols.post(m.url + f"/api/v1/trials/{tid}/kill", timeout=30).status_code == 403

    # Bob, a colleague through the group, stops it (and may kill its trial: an Editor's).
    bob("experiment", "kill", str(eid))
    wait_state(m, eid, "STATE_CANCELED", 60)
    bobs = m.session(m.login("bob", pw["bob"]))
    r = bobs.post(m.url + f"/api/v1/trials/{tid}/kill", timeout=30)
    assert r.status_code not in (401, 403), r.text

    # Unassigned, the group's members are outsiders again.
    admin("rbac", "unassign-role", "Editor", "--group-name-to-assign", "team-a",
          "--workspace-name", "team-ws")  # fmt: skip
    admin("user-group", "remove-user", "team-a", "bob")
    admin("user-group", "delete", "team-a", "--yes")
    summary: Any = (
        m.session(m.login("bob", pw["bob"]))
        .get(m.url + "/api/v1/permissions/summary", timeout=30)
        .json()
    )
    assert summary == {"roles": [], "assignments": []}
