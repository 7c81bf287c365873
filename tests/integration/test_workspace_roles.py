"""Workspaces as teams (issue 40): roles and groups, with the role table itself as the oracle.

The matrix: every permission of det.master.authz.TABLE, exercised by one request each, for
every role (none, Viewer, Editor, WorkspaceAdmin, ClusterAdmin) in the workspace where the role
is held ("own") and in another private workspace ("other"); allowed exactly when the table says
so. Then the findings of the issue: a colleague with Editor kills another member's experiment
(finding 1), a user outside a workspace is refused its bound pool, its projects and its
templates, each in one line naming the workspace and the role (finding 2), and a template that
holds storage keys is applied only by its owner and the workspace's Editors (finding 3). The
master's app runs in this process on real PostgreSQL (api_master).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import requests

from det.master import authz
from det.master.authz import Role

pytestmark = pytest.mark.integration

CONFIG = "name: {name}\nentrypoint: x\nsearcher: {{name: single, metric: loss, max_length: 10}}\n"
SECRET_STORAGE = {
    "checkpoint_storage": {
        "type": "s3", "bucket": "alice-bucket",
        "access_key": "AKIAALICE", "secret_key": "alice-secret-key",
    }
}  # fmt: skip


@dataclass
class Team:
    m: Any
    tokens: dict[str, str]
    ids: dict[str, Any]

    def as_(self, who: str) -> requests.Session:
        return self.m.session(self.tokens[who])

    def call(
        self, who: str, method: str, path: str, body: Any = None, **kw: Any
    ) -> requests.Response:
        return self.as_(who).request(method, self.m.url + path, json=body, timeout=30, **kw)


def _user(m: Any, name: str) -> tuple[int, str]:
    pw = f"{name}-Pw-12345"
    m.post("/api/v1/users", {"user": {"username": name, "active": True}, "password": pw})
    uid = int(m.get(f"/api/v1/users/{name}/by-username")["user"]["id"])
    return uid, m.login(name, pw)


def _assign(t: Team, who: str, role: Role, user: str, workspace: int | None) -> requests.Response:
    ra: dict[str, Any] = {"role": {"roleId": authz.WIRE_IDS[role]}}
    if workspace is not None:
        ra["scopeWorkspaceId"] = workspace
    body = {"userRoleAssignments": [{"userId": t.ids[user], "roleAssignment": ra}]}
    return t.call(who, "POST", "/api/v1/roles/add-assignments", body)


def _ok(r: requests.Response) -> Any:
    assert r.status_code == 200, (r.request.method, r.request.url, r.status_code, r.text)
    return r.json()


def _experiment(t: Team, who: str, project: int, name: str) -> int:
    r = t.call(who, "POST", "/api/v1/experiments",
               {"config": CONFIG.format(name=name), "projectId": project, "activate": False})  # fmt: skip
    return int(_ok(r)["experiment"]["id"])


ROLE_USERS = {None: "u-none", **{r: f"u-{r.value.lower()}" for r in Role}}


@pytest.fixture
def team(api_master: Any) -> Team:
    m = api_master
    t = Team(m, {"admin": m.token}, {})
    for name in ("alice", "bob", "carol", "dave", *ROLE_USERS.values()):
        t.ids[name], t.tokens[name] = _user(m, name)
    for ws in ("own", "other"):
        w = _ok(t.call("alice", "POST", "/api/v1/workspaces", {"name": f"{ws}-ws"}))
        t.ids[f"{ws}_ws"] = w["workspace"]["id"]
        p = _ok(t.call("alice", "POST", f"/api/v1/workspaces/{w['workspace']['id']}/projects",
                       {"name": f"{ws}-proj", "workspaceId": w["workspace"]["id"]}))  # fmt: skip
        t.ids[f"{ws}_proj"] = p["project"]["id"]
    # Alice's things in both, made while they are open.
    for ws in ("own", "other"):
        t.ids[f"{ws}_exp"] = _experiment(t, "alice", t.ids[f"{ws}_proj"], f"alice-{ws}")
        _ok(t.call("alice", "POST", f"/api/v1/templates/{ws}-tpl",
                   {"name": f"{ws}-tpl", "config": {"description": "t"},
                    "workspaceId": t.ids[f"{ws}_ws"]}))  # fmt: skip
        r = t.call("alice", "POST", "/api/v1/commands",
                   {"config": {"entrypoint": ["true"], "resources": {"slots": 0}},
                    "workspaceId": t.ids[f"{ws}_ws"]})  # fmt: skip
        t.ids[f"{ws}_cmd"] = _ok(r)["command"]["id"]
    # The role users: their role in "own"; "other" private with carol its only Viewer.
    for role, user in ROLE_USERS.items():
        if role is Role.CLUSTER_ADMIN:
            _ok(_assign(t, "admin", role, user, None))
        elif role is not None:
            _ok(_assign(t, "alice", role, user, t.ids["own_ws"]))
    _ok(_assign(t, "alice", Role.VIEWER, "carol", t.ids["other_ws"]))
    return t


Probe = Callable[[Team, str, str], requests.Response]

# One request per permission of the table, acting on alice's things in workspace ``ws``.
PROBES: dict[str, Probe] = {
    "workspace.view": lambda t, u, ws: t.call(u, "GET", f"/api/v1/workspaces/{t.ids[ws + '_ws']}"),
    "workspace.update": lambda t, u, ws: t.call(
        u, "PATCH", f"/api/v1/workspaces/{t.ids[ws + '_ws']}", {"defaultComputePool": ""}),
    "workspace.assign": lambda t, u, ws: _assign(t, u, Role.VIEWER, "dave", t.ids[ws + "_ws"]),
    "project.view": lambda t, u, ws: t.call(u, "GET", f"/api/v1/projects/{t.ids[ws + '_proj']}"),
    "project.create": lambda t, u, ws: t.call(
        u, "POST", f"/api/v1/workspaces/{t.ids[ws + '_ws']}/projects",
        {"name": f"p-{u}", "workspaceId": t.ids[ws + "_ws"]}),
    "project.update": lambda t, u, ws: t.call(
        u, "PATCH", f"/api/v1/projects/{t.ids[ws + '_proj']}", {"description": u}),
    "experiment.view": lambda t, u, ws: t.call(u, "GET", f"/api/v1/experiments/{t.ids[ws + '_exp']}"),
    "experiment.create": lambda t, u, ws: t.call(
        u, "POST", "/api/v1/experiments",
        {"config": CONFIG.format(name=u), "projectId": t.ids[ws + "_proj"], "activate": False}),
    "experiment.update": lambda t, u, ws: t.call(
        u, "PUT", f"/api/v1/experiments/{t.ids[ws + '_exp']}/labels/by-{u}"),
    "experiment.delete": lambda t, u, ws: t.call(
        u, "DELETE", f"/api/v1/experiments/{t.ids[ws + '_exp']}/tensorboard-files"),
    "task.view": lambda t, u, ws: t.call(u, "GET", f"/api/v1/commands/{t.ids[ws + '_cmd']}"),
    "task.create": lambda t, u, ws: t.call(
        u, "POST", "/api/v1/commands",
        {"config": {"entrypoint": ["true"], "resources": {"slots": 0}},
         "workspaceId": t.ids[ws + "_ws"]}),
    "task.update": lambda t, u, ws: t.call(
        u, "POST", f"/api/v1/commands/{t.ids[ws + '_cmd']}/set_priority",
        {"commandId": t.ids[ws + "_cmd"], "priority": 30}),
    "template.view": lambda t, u, ws: t.call(u, "GET", f"/api/v1/templates/{ws}-tpl"),
    "template.create": lambda t, u, ws: t.call(
        u, "POST", f"/api/v1/templates/{ws}-tpl-of-{u}",
        {"name": f"{ws}-tpl-of-{u}", "config": {"description": "x"},
         "workspaceId": t.ids[ws + "_ws"]}),
    "template.update": lambda t, u, ws: t.call(
        u, "PATCH", f"/api/v1/templates/{ws}-tpl", {"description": f"by {u}"}),
    "cluster.assign": lambda t, u, ws: t.call(u, "POST", "/api/v1/groups", {"name": f"g-{u}-{ws}"}),
}  # fmt: skip
# Reads det does not yet refuse per workspace (docs/security.md): probed through the workspace.
_VIA_WORKSPACE: set[str] = set()
# Exercised on its own below (it needs a template holding secrets).
_ON_ITS_OWN = {"template.secrets"}


def test_every_permission_of_the_table_has_a_probe() -> None:
    assert set(PROBES) | _ON_ITS_OWN == set(authz.PERMISSIONS)


def _expected(role: Role | None, permission: str, ws: str) -> bool:
    if role is None:
        return False
    if ws == "other" and role is not Role.CLUSTER_ADMIN:
        return False  # a workspace role holds in its workspace only
    return permission in authz.TABLE[role]


def test_each_role_may_do_what_the_table_says_in_its_workspace_and_nothing_in_another(
    team: Team,
) -> None:
    wrong = []
    for (role, user), ws, permission in itertools.product(
        ROLE_USERS.items(), ("own", "other"), sorted(PROBES)
    ):
        r = PROBES[permission](team, user, ws)
        expected = _expected(role, permission, ws)
        label = f"{role.value if role else 'none'} {ws} {permission}: {r.status_code}"
        if r.status_code >= 500:
            wrong.append(f"{label} (server error) {r.text[:200]}")
        elif expected and r.status_code in (401, 403):
            wrong.append(f"{label}, expected allowed: {r.json().get('message')}")
        elif not expected:
            if r.status_code != 403:
                wrong.append(f"{label}, expected refused")
                continue
            message = r.json()["message"]
            needed = authz.weakest_with(permission).value
            if permission in _VIA_WORKSPACE:
                needed = Role.VIEWER.value
            if f"{ws}-ws" not in message and permission != "cluster.assign":
                wrong.append(f"{label}: the refusal names no workspace: {message}")
            if needed not in message:
                wrong.append(f"{label}: the refusal names no {needed}: {message}")
    assert not wrong, "\n".join(wrong)


def test_a_colleague_with_editor_kills_another_members_experiment(team: Team) -> None:
    """Finding 1: on main, 403 "experiment N belongs to alice"."""
    t = team
    _ok(_assign(t, "alice", Role.EDITOR, "bob", t.ids["own_ws"]))
    for action in ("pause", "activate", "kill"):
        _ok(t.call("bob", "POST", f"/api/v1/experiments/{t.ids['own_exp']}/{action}"))
    _ok(t.call("bob", "POST", f"/api/v1/commands/{t.ids['own_cmd']}/kill"))
    # A Viewer reads but may not stop it.
    r = t.call("u-viewer", "POST", f"/api/v1/experiments/{t.ids['own_exp']}/kill")
    assert r.status_code == 403
    assert r.json()["message"] == (
        f"experiment {t.ids['own_exp']} is in workspace 'own-ws': changing another user's"
        " experiment in it needs the Editor role there (you hold: Viewer)"
    )


def test_every_user_is_an_editor_of_an_open_workspace(team: Team) -> None:
    """A new cluster (and every workspace nobody assigned a role on): open-source Determined's
    rules, any user stops a runaway job; deleting another user's experiment stays theirs."""
    t = team
    eid = _experiment(t, "admin", 1, "admins-run")
    _ok(t.call("bob", "POST", f"/api/v1/experiments/{eid}/pause"))
    _ok(t.call("bob", "POST", f"/api/v1/experiments/{eid}/kill"))
    r = t.call("bob", "DELETE", f"/api/v1/experiments/{eid}")
    assert r.status_code == 403
    assert "deleting another user's experiment in it needs the WorkspaceAdmin role" in r.text


def test_a_user_outside_the_workspace_is_refused_its_bound_pool_projects_and_templates(
    team: Team,
) -> None:
    """Finding 2: on main, bob's experiment in alice's project and his command with alice's
    workspaceId both ran in the pool bound to alice's workspace."""
    t = team
    _ok(t.call("admin", "PUT", "/api/v1/resource-pools/default/workspace-bindings",
               {"resourcePoolName": "default", "workspaceIds": [t.ids["own_ws"]]}))  # fmt: skip
    r = t.call("bob", "POST", "/api/v1/experiments",
               {"config": CONFIG.format(name="bobs"), "projectId": t.ids["own_proj"]})  # fmt: skip
    assert r.status_code == 403
    assert r.json()["message"] == (
        "project 'own-proj' is in workspace 'own-ws': creating an experiment in it needs the"
        " Editor role there (you hold: none)"
    )
    r = t.call("bob", "POST", "/api/v1/commands",
               {"config": {"entrypoint": ["true"], "resources": {"slots": 0}},
                "workspaceId": t.ids["own_ws"]})  # fmt: skip
    assert r.status_code == 403
    assert r.json()["message"] == (
        "workspace 'own-ws': launching a task in it needs the Editor role there (you hold: none)"
    )
    r = t.call("bob", "GET", f"/api/v1/projects/{t.ids['own_proj']}")
    assert r.status_code == 403
    assert r.json()["message"] == (
        f"project {t.ids['own_proj']} is in workspace 'own-ws': reading its projects needs the"
        " Viewer role there (you hold: none)"
    )
    r = t.call("bob", "GET", "/api/v1/templates/own-tpl")
    assert r.status_code == 403
    assert r.json()["message"] == (
        "template 'own-tpl' is in workspace 'own-ws': using its templates needs the Viewer role"
        " there (you hold: none)"
    )
    # ...and his lists do not show them.
    names = [w["name"] for w in _ok(t.call("bob", "GET", "/api/v1/workspaces"))["workspaces"]]
    assert "own-ws" not in names and "Uncategorized" in names
    templates = _ok(t.call("bob", "GET", "/api/v1/templates"))["templates"]
    assert not [x for x in templates if x["name"] == "own-tpl"]
    projects = _ok(t.call("bob", "GET", "/api/v1/workspaces/0/projects"))["projects"]
    assert not [p for p in projects if p["name"] == "own-proj"]
    # Nor its experiments: their pages, trials, checkpoints and code, and the list.
    for path in ("", "/trials", "/checkpoints", "/file_tree", "/model_def"):
        r = t.call("bob", "GET", f"/api/v1/experiments/{t.ids['own_exp']}{path}")
        assert r.status_code == 403, (path, r.text)
    assert r.json()["message"] == (
        f"experiment {t.ids['own_exp']} is in workspace 'own-ws': reading its experiments needs"
        " the Viewer role there (you hold: none)"
    )
    for who, sees in (("bob", False), ("u-viewer", True), ("alice", True)):
        listed = _ok(t.call(who, "GET", "/api/v1/experiments", params={"limit": 100}))
        ids = {e["id"] for e in listed["experiments"]}
        assert (t.ids["own_exp"] in ids) is sees, who
        assert t.ids["other_exp"] in ids if who == "alice" else True
        commands = _ok(t.call(who, "GET", "/api/v1/commands"))["commands"]
        assert (t.ids["own_cmd"] in {c["id"] for c in commands}) is sees, who
    # Nor its trials by id, through a fork (its code goes to the fork), or a TensorBoard
    # (test_official_rbac.py, which has trials).
    r = t.call("bob", "POST", "/api/v1/experiments",
               {"config": CONFIG.format(name="fork"), "parentId": t.ids["own_exp"]})  # fmt: skip
    assert r.status_code == 403 and "'own-ws'" in r.text, r.text
    r = t.call("bob", "GET", f"/api/v1/commands/{t.ids['own_cmd']}")
    assert r.status_code == 403
    assert r.json()["message"] == (
        f"command {t.ids['own_cmd']} is in workspace 'own-ws': reading its tasks needs the"
        " Viewer role there (you hold: none)"
    )


def test_a_template_holding_secrets_is_applied_by_its_owner_and_the_workspaces_editors(
    team: Team,
) -> None:
    """Finding 3: on main, bob's trial got alice's storage keys by naming her template."""
    t = team
    for ws_id, name in ((1, "alice-open-tpl"), (t.ids["own_ws"], "alice-team-tpl")):
        _ok(t.call("alice", "POST", f"/api/v1/templates/{name}",
                   {"name": name, "config": SECRET_STORAGE, "workspaceId": ws_id}))  # fmt: skip
    # In the open default workspace, every user is an Editor, but not an assigned one.
    r = t.call("bob", "POST", "/api/v1/experiments",
               {"config": CONFIG.format(name="bobs"), "template": "alice-open-tpl"})  # fmt: skip
    assert r.status_code == 403
    assert r.json()["message"] == (
        "template 'alice-open-tpl' is in workspace 'Uncategorized': applying another user's"
        " template that holds secrets needs the Editor role there (you hold: an open"
        " workspace's Editor, which does not count for this)"
    )
    r = t.call("bob", "POST", "/api/v1/commands",
               {"config": {"entrypoint": ["true"], "resources": {"slots": 0}},
                "templateName": "alice-open-tpl"})  # fmt: skip
    assert r.status_code == 403
    # Its owner applies it; an assigned Editor of its workspace too; a Viewer may not.
    _ok(t.call("alice", "POST", "/api/v1/experiments",
               {"config": CONFIG.format(name="alices"), "template": "alice-open-tpl"}))  # fmt: skip
    ok = t.call("u-editor", "POST", "/api/v1/experiments",
                {"config": CONFIG.format(name="eds"), "projectId": t.ids["own_proj"],
                 "template": "alice-team-tpl"})  # fmt: skip
    _ok(ok)
    r = t.call("u-viewer", "POST", "/api/v1/commands",
               {"config": {"entrypoint": ["true"], "resources": {"slots": 0}},
                "templateName": "alice-team-tpl"})  # fmt: skip
    assert r.status_code == 403 and "needs the Editor role there (you hold: Viewer)" in r.text


def test_a_groups_role_holds_for_its_members(team: Team) -> None:
    t = team
    g = _ok(
        t.call("admin", "POST", "/api/v1/groups", {"name": "readers", "addUsers": [t.ids["dave"]]})
    )
    gid = g["group"]["groupId"]
    assert [u["username"] for u in g["group"]["users"]] == ["dave"]
    body = {"groupRoleAssignments": [{"groupId": gid, "roleAssignment": {
        "role": {"roleId": authz.WIRE_IDS[Role.VIEWER]}, "scopeWorkspaceId": t.ids["own_ws"]}}]}  # fmt: skip
    _ok(t.call("alice", "POST", "/api/v1/roles/add-assignments", body))
    _ok(t.call("dave", "GET", f"/api/v1/projects/{t.ids['own_proj']}"))
    r = t.call("dave", "POST", "/api/v1/experiments",
               {"config": CONFIG.format(name="d"), "projectId": t.ids["own_proj"]})  # fmt: skip
    assert r.status_code == 403 and "(you hold: Viewer)" in r.text
    summary = _ok(t.call("dave", "GET", "/api/v1/permissions/summary"))
    assert summary["assignments"] == [{"roleId": authz.WIRE_IDS[Role.VIEWER],
                                       "scopeWorkspaceIds": [t.ids["own_ws"]],
                                       "scopeCluster": False}]  # fmt: skip
    # Out of the group, out of the workspace.
    _ok(t.call("admin", "PUT", f"/api/v1/groups/{gid}", {"removeUsers": [t.ids["dave"]]}))
    assert t.call("dave", "GET", f"/api/v1/projects/{t.ids['own_proj']}").status_code == 403
    # Groups and cluster roles are a ClusterAdmin's.
    r = t.call("alice", "POST", "/api/v1/groups", {"name": "alices"})
    assert r.status_code == 403
    assert r.json()["message"] == (
        "managing roles and groups of the cluster needs the ClusterAdmin role on the cluster"
        " (you hold: none)"
    )


def test_a_workspace_stays_private_when_its_last_assignment_goes(team: Team) -> None:
    t = team
    w = _ok(t.call("alice", "POST", "/api/v1/workspaces", {"name": "lab"}))["workspace"]["id"]
    _ok(t.call("bob", "GET", f"/api/v1/workspaces/{w}"))  # open: every user its Editor
    _ok(_assign(t, "alice", Role.VIEWER, "carol", w))
    assert t.call("bob", "GET", f"/api/v1/workspaces/{w}").status_code == 403
    ra = {"role": {"roleId": authz.WIRE_IDS[Role.VIEWER]}, "scopeWorkspaceId": w}
    body = {"userRoleAssignments": [{"userId": t.ids["carol"], "roleAssignment": ra}]}
    _ok(t.call("alice", "POST", "/api/v1/roles/remove-assignments", body))
    r = t.call("bob", "GET", f"/api/v1/workspaces/{w}")
    assert r.status_code == 403, r.text
    _ok(t.call("alice", "GET", f"/api/v1/workspaces/{w}"))  # its owner: WorkspaceAdmin
    members = _ok(t.call("alice", "GET", f"/api/v1/roles/workspace/{w}"))
    assert members == {"groups": [], "usersAssignedDirectly": [], "assignments": []}


def test_cluster_admin_is_the_admin_flag(team: Team) -> None:
    """Assigned through the role API, ClusterAdmin reaches the admin-only routes (which read
    the flag); removed, it does not; a group cannot hold it; the last admin keeps it."""
    t = team
    assert t.call("u-clusteradmin", "GET", "/api/v1/master/config").status_code == 200
    assert _ok(t.call("admin", "GET", f"/api/v1/users/{t.ids['u-clusteradmin']}"))["user"]["admin"]
    roles = _ok(t.call("bob", "GET", f"/api/v1/roles/search/by-user/{t.ids['u-clusteradmin']}"))
    assert [r["role"]["name"] for r in roles["roles"]] == ["ClusterAdmin"]
    ra = {"role": {"roleId": authz.WIRE_IDS[Role.CLUSTER_ADMIN]}, "scopeCluster": True}
    body = {"userRoleAssignments": [{"userId": t.ids["u-clusteradmin"], "roleAssignment": ra}]}
    _ok(t.call("admin", "POST", "/api/v1/roles/remove-assignments", body))
    assert t.call("u-clusteradmin", "GET", "/api/v1/master/config").status_code == 403
    g = _ok(t.call("admin", "POST", "/api/v1/groups", {"name": "admins"}))["group"]["groupId"]
    r = t.call("admin", "POST", "/api/v1/roles/add-assignments",
               {"groupRoleAssignments": [{"groupId": g, "roleAssignment": ra}]})  # fmt: skip
    assert r.status_code == 400
    assert r.json()["message"] == (
        "ClusterAdmin is the admin flag: it is given to users, not to groups"
    )
    me = _ok(t.call("admin", "GET", "/api/v1/me"))["user"]["id"]
    body = {"userRoleAssignments": [{"userId": me, "roleAssignment": ra}]}
    r = t.call("admin", "POST", "/api/v1/roles/remove-assignments", body)
    assert r.status_code == 409 and "last active admin" in r.json()["message"], r.text


def test_a_job_follows_its_workspace_pool_bindings_and_its_editors(
    tmp_path: Any, migrated_db: str
) -> None:
    """On main a job's owner could move it, through the job queue, to a pool bound to another
    workspace (the binding was checked only at creation); and only its owner could reprioritise
    it, not the workspace's Editors."""
    from tests.integration.inproc import in_process_master

    pools = {"resource_pools": [{"pool_name": "default"}, {"pool_name": "team"}]}
    with in_process_master(tmp_path, migrated_db, pools) as m:
        t = Team(m, {"admin": m.token}, {})
        for name in ("alice", "bob"):
            t.ids[name], t.tokens[name] = _user(m, name)
        ws = _ok(t.call("alice", "POST", "/api/v1/workspaces", {"name": "team-ws"}))
        wid = ws["workspace"]["id"]
        _ok(t.call("admin", "PUT", "/api/v1/resource-pools/team/workspace-bindings",
                   {"resourcePoolName": "team", "workspaceIds": [wid]}))  # fmt: skip
        eid = _experiment(t, "bob", 1, "bobs")
        job = _ok(t.call("bob", "GET", f"/api/v1/experiments/{eid}"))["experiment"]["jobId"]
        r = t.call("bob", "POST", "/api/v1/job-queues",
                   {"updates": [{"jobId": job, "resourcePool": "team"}]})  # fmt: skip
        assert r.status_code == 400, r.text
        assert r.json()["message"] == (
            "resourcePool: resource pool 'team' is bound to other workspaces; workspace"
            " 'Uncategorized' may not use it (its pools: default)"
        )
        # An Editor of the job's workspace (every user, in an open one) reprioritises it.
        _ok(t.call("alice", "POST", "/api/v1/job-queues",
                   {"updates": [{"jobId": job, "priority": 10}]}))  # fmt: skip


def test_a_private_workspaces_task_and_its_logs_are_for_its_readers(team: Team) -> None:
    """GetTask and a task's logs, by task id, as the task itself is read: bob, with no role in
    the private workspace, is refused alice's command there (he read both by its task id
    before); carol (Viewer there) and alice read them; no such task is a 404, as Determined
    answers."""
    t = team
    cmd = t.ids["other_cmd"]
    for path in (f"/api/v1/tasks/{cmd}", f"/api/v1/tasks/{cmd}/logs"):
        r = t.call("bob", "GET", path)
        assert r.status_code == 403, (path, r.status_code, r.text)
        assert "needs" in r.json()["message"] and "other-ws" in r.json()["message"], r.text
        for reader in ("carol", "alice", "admin"):
            assert t.call(reader, "GET", path).status_code == 200, (reader, path)
    # A command in an open workspace (the default one): every user's.
    r = t.call("alice", "POST", "/api/v1/commands",
               {"config": {"entrypoint": ["true"], "resources": {"slots": 0}}})  # fmt: skip
    open_cmd = _ok(r)["command"]["id"]
    assert t.call("bob", "GET", f"/api/v1/tasks/{open_cmd}/logs").status_code == 200
    for path in ("/api/v1/tasks/no-such-task", "/api/v1/tasks/no-such-task/logs"):
        r = t.call("bob", "GET", path)
        assert r.status_code == 404 and r.json()["message"] == "task no-such-task not found", r.text
