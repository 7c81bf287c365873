"""Who may do what, route by route, for every route of the master: the expected table.

Six callers against Bob's resources: nobody (no token), Bob (the owner), Eve (another user),
the admin, Bob's running task (its allocation token) and Eve's running task. ``ROUTES`` lists
every route with what each caller may do, in that order: ``A`` allowed, ``D`` denied. The rules
are those of a new cluster, where no role is assigned (det.master.authz): every workspace is
open, so every user reads everything and is an Editor of Bob's workspaces, who pauses, kills,
archives, moves and edits Bob's experiments and interactive tasks (``EDITOR``); changing
anything else (deleting an experiment, reporting into it or its trials, its log retention, a
workspace, project, template, model, checkpoint) is for its owner and admins; agents, cluster settings, users and groups are for
admins; a task acts only inside its own task. Roles and private workspaces are
test_workspace_roles.py's. A route missing from the table fails the test, so a new route must
say who may call it.

Denied means 401 for nobody and 401/403 for the others, with a valid body, so a refusal is the
rule and not a parse error. Allowed means neither, and never a 5xx (a read must answer 200; a
write may still be refused for the resource's state, e.g. deleting a running experiment).

The routes run in the table's order on one master: reads first, then changes that keep the
resources, then the ones that end them (kills, deletes, a password change, logout). The master's
app and control loop run in the test's process (tests/integration/inproc.py); an answer is asked
for as a stream and closed unread, as over a socket (a follow's never ends).
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests
from flask import Flask

from det.master.api import BLUEPRINTS
from det.master.services.users import CLIENT_SALT
from tests.fakes.sim_agent import SimAgent, wait
from tests.integration.inproc import InProcessMaster, control_loop, in_process_master, routed

pytestmark = pytest.mark.integration

CALLERS = ("nobody", "bob", "eve", "admin", "bob_task", "eve_task")
PASSWORDS = {"bob": "bob-pw-1234", "eve": "eve-pw-1234"}
CONFIG = """
name: {name}
entrypoint: x
searcher: {{name: single, metric: loss, max_length: 10}}
"""


@dataclass
class World:
    m: InProcessMaster
    ids: dict[str, Any]
    tokens: dict[str, dict[str, str]]
    agents: list[SimAgent] = field(default_factory=list)

    def headers(self, caller: str, *, fresh: bool = False) -> dict[str, str]:
        if fresh and caller in ("bob", "eve", "admin"):
            pw = PASSWORDS.get(caller)
            token = self.m.login(caller, pw) if pw else self.m.login()
            return {"Authorization": f"Bearer {token}"}
        return self.tokens[caller]


def _has_len(d: dict[int, Any], n: int) -> Callable[[], bool]:
    return lambda: len(d) == n


def client_hash(password: str) -> str:
    """What Determined's clients send as a password (SetUserPassword takes it hashed)."""
    return hashlib.sha512((CLIENT_SALT + password).encode()).hexdigest()


def _webhook(workspace_id: int, url: str) -> dict[str, Any]:
    return {
        "name": "bobs-hook", "url": url, "webhookType": "WEBHOOK_TYPE_DEFAULT",
        "workspaceId": workspace_id,
        "triggers": [{"triggerType": "TRIGGER_TYPE_EXPERIMENT_STATE_CHANGE",
                      "condition": {"state": "COMPLETED"}}],
    }  # fmt: skip


def _task_headers(token: str) -> dict[str, str]:
    return {"Grpc-Metadata-x-allocation-token": f"Bearer {token}"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, pg_server: str) -> Iterator[World]:
    import psycopg

    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute('DROP DATABASE IF EXISTS "det_authz_roles" WITH (FORCE)')
        conn.execute('CREATE DATABASE "det_authz_roles"')
    head, sep, query = pg_server.partition("?")
    db = f"{head.rpartition('/')[0]}/det_authz_roles{sep}{query}"
    # The master's app and control loop in this process; the SimAgents' calls reach the app.
    stack = contextlib.ExitStack()
    m = stack.enter_context(in_process_master(tmp_path_factory.mktemp("authz-roles"), db))
    stack.enter_context(routed(m))
    stack.enter_context(control_loop(m))
    specs: dict[int, dict[str, Any]] = {}
    release = threading.Event()

    def hold(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        if "DET_TRIAL_ID" in spec["env"]:  # not a command's
            specs[int(spec["env"]["DET_TRIAL_ID"])] = spec
        while not release.is_set() and not killed.is_set():
            release.wait(0.2)
        return 0

    w = World(m, {}, {"nobody": {}, "admin": {"Authorization": f"Bearer {m.token}"}})
    try:
        for name, pw in PASSWORDS.items():
            m.post("/api/v1/users", {"user": {"username": name, "active": True}, "password": pw})
            w.tokens[name] = {"Authorization": f"Bearer {m.login(name, pw)}"}
            w.ids[f"{name}_id"] = m.get(f"/api/v1/users/{name}/by-username")["user"]["id"]
        w.agents.append(SimAgent(m.url, m.agent_token, "sim-0", slots=2, train=hold).start())
        for who in ("bob", "eve"):
            s = requests.Session()
            s.headers.update(w.tokens[who])
            r = s.post(
                m.url + "/api/v1/experiments",
                json={"config": CONFIG.format(name=f"{who}s"), "activate": True},
                timeout=30,
            )
            assert r.status_code == 200, r.text
            eid = int(r.json()["experiment"]["id"])
            wait(_has_len(specs, len(specs) + 1), 60, f"{who}'s trial running")
            trial_id = max(specs)
            env = specs[trial_id]["env"]
            w.tokens[f"{who}_task"] = _task_headers(env["DET_SESSION_TOKEN"])
            w.ids.update(
                {
                    f"{who}_experiment": eid,
                    f"{who}_trial": trial_id,
                    f"{who}_task_id": env["DET_TASK_ID"],
                    f"{who}_allocation": env["DET_ALLOCATION_ID"],
                }
            )
        # Bob's task reports two checkpoints; the second becomes a model version.
        bob_task = requests.Session()
        bob_task.headers.update(w.tokens["bob_task"])
        for key in ("bob_checkpoint", "bob_checkpoint2"):
            w.ids[key] = str(uuid.uuid4())
            r = bob_task.post(
                m.url + "/api/v1/checkpoints",
                json={
                    "checkpoint": {
                        "uuid": w.ids[key],
                        "taskId": w.ids["bob_task_id"],
                        "allocationId": w.ids["bob_allocation"],
                        "resources": {"model.pt": 10},
                        "metadata": {"steps_completed": 5},
                    }
                },
                timeout=10,
            )
            assert r.status_code == 200, r.text
        # The checkpoint's files, where the master's shared_fs storage keeps them.
        files = m.data_dir.parent / "checkpoints" / w.ids["bob_checkpoint"]
        files.mkdir(parents=True)
        (files / "model.pt").write_bytes(b"weights")
        r = bob_task.post(
            f"{m.url}/api/v1/trials/{w.ids['bob_trial']}/metrics",
            json={"group": "validation", "metrics": {"trialRunId": 1, "stepsCompleted": 5,
                  "metrics": {"avgMetrics": {"loss": 0.25}}}},
            timeout=10,
        )  # fmt: skip
        assert r.status_code == 200, r.text
        bob = requests.Session()
        bob.headers.update(w.tokens["bob"])

        def bob_post(path: str, body: Any) -> Any:
            r = bob.post(m.url + path, json=body, timeout=10)
            assert r.status_code == 200, (path, r.text)
            return r.json()

        bob_post("/api/v1/models", {"name": "bobs-model"})
        bob_post(
            "/api/v1/models/bobs-model/versions",
            {"modelName": "bobs-model", "checkpointUuid": w.ids["bob_checkpoint2"]},
        )
        ws = bob_post("/api/v1/workspaces", {"name": "bobs-ws"})["workspace"]
        w.ids["bob_workspace"] = ws["id"]
        project = bob_post(
            f"/api/v1/workspaces/{ws['id']}/projects",
            {"name": "bobs-project", "workspaceId": ws["id"], "key": "BOBP"},
        )["project"]
        w.ids["bob_project"] = project["id"]
        w.ids["bob_project_key"] = project["key"]
        w.ids["template"] = "bobs-template"
        # An admin's webhook in bob's workspace (so it may use loopback: port 9 refuses at once).
        w.ids["bob_webhook"] = m.post(
            "/api/v1/webhooks", _webhook(ws["id"], "http://127.0.0.1:9/")
        )["webhook"]["id"]
        bob_post(
            "/api/v1/templates/bobs-template",
            {"name": "bobs-template", "config": {"description": "t"}, "workspaceId": 1},
        )
        w.ids["bob_token"] = bob_post("/api/v1/tokens", {"userId": w.ids["bob_id"]})["tokenId"]
        w.ids["bob_job"] = m.get(f"/api/v1/experiments/{w.ids['bob_experiment']}")["experiment"][
            "jobId"
        ]
        w.ids["bob_command"] = bob_post(
            "/api/v1/commands", {"config": {"entrypoint": ["true"], "resources": {"slots": 0}}}
        )["command"]["id"]
        w.ids["bob_notebook"] = bob_post(
            "/api/v1/notebooks", {"config": {"resources": {"slots": 0}}}
        )["notebook"]["id"]
        w.ids["bob_shell"] = bob_post("/api/v1/shells", {"config": {"resources": {"slots": 0}}})[
            "shell"
        ]["id"]
        w.ids["bob_tensorboard"] = bob_post(
            "/api/v1/tensorboards",
            {"experimentIds": [w.ids["bob_experiment"]], "config": {"resources": {"slots": 0}}},
        )["tensorboard"]["id"]
        # Bob's unmanaged experiment (a core_v2 script's) and its trial, for /task-logs.
        r = bob.put(
            m.url + "/api/v1/experiments/by-external-id/bobs-unmanaged",
            json={"config": UNMANAGED_CONFIG, "unmanaged": True},
            timeout=10,
        )
        assert r.status_code == 200, r.text
        w.ids["bob_unmanaged_task_id"] = bob.put(
            m.url + "/api/v1/trials",
            json={
                "createTrialRequest": {
                    "experimentId": r.json()["experiment"]["id"],
                    "unmanaged": True,
                },
                "externalTrialId": "t",
            },
            timeout=10,
        ).json()["trial"]["taskId"]
        # An idle agent for the agent and slot routes (disabling sim-0 would stop both trials).
        w.agents.append(SimAgent(m.url, m.agent_token, "sim-idle", slots=1, train=hold).start())
        wait(
            lambda: any(a["id"] == "sim-idle" for a in m.get("/api/v1/agents")["agents"]),
            30,
            "the idle agent registered",
        )
        yield w
    finally:
        release.set()
        for a in w.agents:
            a.stop()
        stack.close()


Body = Callable[[World, str], Any]


@dataclass(frozen=True)
class Route:
    method: str
    rule: str
    expect: str  # one letter per caller of CALLERS
    body: Body | None = None
    params: dict[str, Any] | None = None
    fresh: bool = False  # log the users in again for each call (the route ends sessions)
    read_ok: int = 200  # what an allowed read answers


def _metrics(w: World, group: str, step: int) -> dict[str, Any]:
    return {
        "trialId": w.ids["bob_trial"],
        "trialRunId": 1,
        "stepsCompleted": step,
        "metrics": {"avgMetrics": {"loss": 0.5}},
    }


def _ckpt(w: World, caller: str) -> dict[str, Any]:
    return {
        "checkpoint": {
            "uuid": str(uuid.uuid4()),
            "taskId": w.ids["bob_task_id"],
            "allocationId": w.ids["bob_allocation"],
            "resources": {"model.pt": 1},
            "metadata": {"steps_completed": 6},
        }
    }


ANY_USER = "DAAADD"  # every user reads it; tasks do not
ANY_USER_AND_OWN_TASK = "DAAAAD"
OWNER = "DADADD"  # the owner and admins
OWNER_AND_OWN_TASK = "DADAAD"
ADMIN = "DDDADD"
# Changing an experiment or interactive task of an open workspace (every user its Editor,
# det.master.authz; Bob's are in the default workspace): the owner, Eve and admins.
EDITOR = ANY_USER
OWN_TASK = "DDDDAD"
PUBLIC = "AAAAAA"

UNMANAGED_CONFIG = "name: unmanaged-run\nsearcher: {name: single, metric: loss}\n"

E = "/api/v1/experiments/<int:experiment_id>"
T = "/api/v1/trials/<int:trial_id>"
AL = "/api/v1/allocations/<allocation_id>"
M = "/api/v1/models/<name>"
P = "/api/v1/projects/<int:project_id>"
W = "/api/v1/workspaces/<int:workspace_id>"
AG = "/api/v1/agents/<agent_id>"
USAGE_WINDOW = {"timestampAfter": "2020-01-01T00:00:00Z", "timestampBefore": "2030-01-01T00:00:00Z"}
USAGE_DAYS = {
    "startDate": "2020-01-01",
    "endDate": "2020-01-03",
    "period": "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY",
}

# fmt: off
ROUTES: list[Route] = [
    # --- open to all -----------------------------------------------------------------------
    Route("GET", "/info", PUBLIC),
    Route("GET", "/health", PUBLIC),
    Route("GET", "/api/v1/master", PUBLIC),
    Route("POST", "/api/v1/auth/login", PUBLIC,
          lambda w, c: {"username": "bob", "password": PASSWORDS["bob"]}),
    Route("GET", "/", PUBLIC),
    Route("GET", "/det/", PUBLIC),
    Route("GET", "/det/<path:page>", PUBLIC),
    Route("GET", "/det/static/<name>", PUBLIC),
    Route("GET", "/favicon.ico", PUBLIC),
    # open at the route, but only the wake-up token derived from the cluster's secret (the
    # platform's scheduler holds it) is accepted: none of these callers has it
    Route("POST", "/api/v1/master/wakeup", "DDDDDD"),
    # open at the route, but only a ticket the provisioner issued for a launch is accepted
    # (once per machine): none of these callers has one
    Route("POST", "/api/v1/agent_enrollments", "DDDDDD",
          lambda w, c: {"ticket": "detenroll1.guessed", "agentId": "i-0guess"}),
    # --- reads ------------------------------------------------------------------------------
    Route("GET", "/api/v1/me", "DAAAAA"),  # a task learns the user it acts for
    Route("GET", "/api/v1/openapi.json", ANY_USER),
    Route("GET", "/api/v1/master/config", ADMIN),
    Route("GET", "/api/v1/master/cluster_message", ANY_USER),
    Route("GET", "/api/v1/master/logs", ADMIN, params={"limit": 1}),
    Route("GET", "/api/v1/master/task-container-policy", ANY_USER),
    Route("GET", "/api/v1/master/task-container-policy/history", ADMIN),
    Route("GET", "/api/v1/agents", ANY_USER),
    Route("GET", AG, ANY_USER),
    Route("GET", AG + "/slots", ANY_USER),
    Route("GET", AG + "/slots/<slot_id>", ANY_USER),
    Route("GET", "/api/v1/resource-pools", ANY_USER),
    Route("GET", "/api/v1/resource-pools/<name>/cost", ANY_USER, read_ok=404),  # no prices set
    Route("GET", "/api/v1/resource-pools/<name>/events", ANY_USER),
    Route("GET", "/api/v1/resource-pools/<name>/instances", ANY_USER),
    Route("GET", "/api/v1/resource-pools/<name>/workspace-bindings", ANY_USER),
    # binding pools is for admins (a workspace that does not exist: 404 for them, no change)
    *[
        Route(method, "/api/v1/resource-pools/<name>/workspace-bindings", ADMIN,
              lambda w, c: {"resourcePoolName": "default", "workspaceIds": [987654]})
        for method in ("POST", "DELETE", "PUT")
    ],
    Route("GET", "/api/v1/job-queues", ANY_USER),
    Route("GET", "/api/v1/job-queues-v2", ANY_USER),
    # usage and cost reports (Determined's open-source edition shows them to every user)
    Route("GET", "/api/v1/resources/allocation/raw", ANY_USER, params=USAGE_WINDOW),
    Route("GET", "/api/v1/resources/allocation/aggregated", ANY_USER, params=USAGE_DAYS),
    Route("GET", "/resources/allocation/raw", ANY_USER, params=USAGE_WINDOW),
    Route("GET", "/resources/allocation/aggregated", ANY_USER, params=USAGE_DAYS),
    Route("GET", "/resources/allocation/allocations-csv", ANY_USER, params=USAGE_WINDOW),
    Route("GET", E + "/cost", ANY_USER),
    Route("GET", "/api/v1/experiments", ANY_USER),
    Route("GET", E, ANY_USER_AND_OWN_TASK),
    Route("GET", E + "/trials", ANY_USER_AND_OWN_TASK),
    Route("GET", E + "/searcher/best_searcher_validation_metric", ANY_USER_AND_OWN_TASK),
    Route("GET", E + "/checkpoints", ANY_USER),
    Route("GET", E + "/file_tree", ANY_USER),
    Route("GET", E + "/model_def", ANY_USER),
    Route("POST", E + "/file", ANY_USER, lambda w, c: {"experimentId": w.ids["bob_experiment"], "path": "x"}),
    Route("POST", "/api/v1/preview-hp-search", ANY_USER,
          lambda w, c: {"config": {"searcher": {"name": "single", "metric": "loss", "max_length": 1}}}),
    Route("GET", T, ANY_USER_AND_OWN_TASK),
    Route("GET", T + "/checkpoints", ANY_USER_AND_OWN_TASK),
    Route("GET", T + "/logs", ANY_USER),
    Route("GET", T + "/remaining_log_retention_days", ANY_USER_AND_OWN_TASK),
    Route("GET", T + "/metrics", ANY_USER, params={"group": "training"}),
    Route("GET", T + "/workloads", ANY_USER),
    Route("GET", "/api/v1/trials/metrics/training_metrics", ANY_USER),
    Route("GET", "/api/v1/trials/metrics/validation_metrics", ANY_USER),
    Route("GET", "/api/v1/trials/metrics/trial_metrics", ANY_USER, params={"group": "training"}),
    Route("GET", "/api/v1/trials/time-series", ANY_USER, params={"metricNames": "loss", "trialIds": 1}),
    Route("GET", "/api/v1/checkpoints/<uid>", ANY_USER_AND_OWN_TASK),
    Route("GET", "/api/v1/runs/<int:run_id>/metadata", ANY_USER_AND_OWN_TASK),
    Route("GET", "/api/v1/checkpoints/<uid>/metrics", ANY_USER),
    Route("GET", M + "/versions/<int:number>/metrics", ANY_USER),
    Route("GET", "/checkpoints/<uid>", ANY_USER),
    Route("GET", "/api/v1/tasks", ANY_USER),
    Route("GET", "/api/v1/tasks/<task_id>/logs", ANY_USER),
    Route("GET", "/api/v1/tasks/<task_id>/context", ANY_USER_AND_OWN_TASK),
    Route("GET", "/api/v1/tasks/<task_id>/context_directory", ANY_USER_AND_OWN_TASK),
    Route("GET", AL + "/signals/preemption", OWNER_AND_OWN_TASK, params={"timeoutSeconds": 0}),
    Route("GET", AL + "/signals/pending_preemption", OWNER_AND_OWN_TASK),
    Route("GET", "/api/v1/models", ANY_USER),
    Route("GET", "/api/v1/model/labels", ANY_USER),
    Route("GET", M, ANY_USER),
    Route("GET", M + "/versions", ANY_USER),
    Route("GET", M + "/versions/<int:number>", ANY_USER),
    Route("GET", "/api/v1/workspaces", ANY_USER),
    Route("GET", W, ANY_USER),
    Route("GET", W + "/projects", ANY_USER),
    Route("GET", W + "/available-resource-pools", ANY_USER),
    Route("GET", P, ANY_USER),
    Route("GET", "/api/v1/projects/key/<key>", ANY_USER),
    Route("GET", "/api/v1/templates", ANY_USER),
    Route("GET", "/api/v1/webhooks", ANY_USER),
    Route("GET", "/api/v1/webhooks/<int:webhook_id>/events", OWNER),
    Route("POST", "/api/v1/webhooks", OWNER,
          lambda w, c: _webhook(w.ids["bob_workspace"], "http://10.0.0.1/hook")),
    Route("POST", "/api/v1/webhooks/<int:webhook_id>/test", OWNER),
    Route("PATCH", "/api/v1/webhooks/<int:webhook_id>", OWNER,
          lambda w, c: {"url": "http://127.0.0.1:9/patched"}),
    Route("POST", "/api/v1/webhooks/<int:webhook_id>/events/resend", OWNER, lambda w, c: {}),
    Route("POST", "/api/v1/webhooks/custom", OWNER_AND_OWN_TASK,
          lambda w, c: {"experimentId": w.ids["bob_experiment"], "data": {"title": "t"}}),
    Route("GET", "/api/v1/templates/<name>", ANY_USER),
    # roles and user groups (det.master.authz): every user reads them; assigning on Bob's
    # workspace is for its owner and admins (no user 987654: 404 once allowed, no change);
    # groups are a ClusterAdmin's (no group 987654: 404 for the admin)
    Route("POST", "/api/v1/roles/search", ANY_USER, lambda w, c: {"limit": 10}),
    Route("POST", "/api/v1/roles/search/by-assignability", ANY_USER, lambda w, c: {"limit": 10}),
    Route("GET", "/api/v1/permissions/summary", ANY_USER),
    Route("GET", "/api/v1/roles/search/by-user/<int:user_id>", ANY_USER),
    Route("GET", "/api/v1/roles/search/by-group/<int:group_id>", ANY_USER, read_ok=404),
    Route("POST", "/api/v1/roles/search/by-ids", ANY_USER, lambda w, c: {"roleIds": [4]}),
    Route("GET", "/api/v1/roles/workspace/<int:workspace_id>", ANY_USER),
    *[
        Route("POST", f"/api/v1/roles/{verb}-assignments", OWNER, lambda w, c: {
            "userRoleAssignments": [{"userId": 987654, "roleAssignment": {
                "role": {"roleId": 4}, "scopeWorkspaceId": w.ids["bob_workspace"]}}]})
        for verb in ("add", "remove")
    ],
    Route("POST", "/api/v1/groups", ADMIN, lambda w, c: {"name": f"group-of-{c}"}),
    Route("POST", "/api/v1/groups/search", ANY_USER, lambda w, c: {"limit": 10}),
    Route("GET", "/api/v1/groups/<int:group_id>", ANY_USER, read_ok=404),
    Route("PUT", "/api/v1/groups/<int:group_id>", ADMIN, lambda w, c: {"name": f"g-{c}"}),
    Route("DELETE", "/api/v1/groups/<int:group_id>", ADMIN),
    Route("GET", "/api/v1/tokens", ANY_USER),
    # a user's own WebUI settings: each user their own, never a task
    Route("GET", "/api/v1/users/setting", ANY_USER),
    Route("POST", "/api/v1/users/setting", ANY_USER,
          lambda w, c: {"settings": [{"storagePath": "p", "key": "k", "value": c}]}),
    Route("POST", "/api/v1/users/setting/reset", ANY_USER),
    Route("GET", "/api/v1/users", ANY_USER),
    Route("GET", "/api/v1/users/<int:user_id>", ANY_USER),
    Route("GET", "/api/v1/users/<username>/by-username", ANY_USER),
    Route("GET", "/api/v1/commands", ANY_USER),
    Route("GET", "/api/v1/commands/<command_id>", ANY_USER),
    Route("GET", "/api/v1/notebooks", ANY_USER),
    Route("GET", "/api/v1/notebooks/<notebook_id>", ANY_USER),
    Route("GET", "/api/v1/tasks/<task_id>", ANY_USER),
    Route("GET", "/api/v1/shells", ANY_USER),
    Route("GET", "/api/v1/shells/<shell_id>", ANY_USER),
    Route("GET", "/api/v1/tensorboards", ANY_USER),
    Route("GET", "/api/v1/tensorboards/<tensorboard_id>", ANY_USER),
    # --- a task's own calls, and reports into Bob's trial ---------------------------------
    Route("POST", AL + "/notify_container_running", OWN_TASK,
          lambda w, c: {"allocationId": w.ids["bob_allocation"], "data": {}}),
    Route("POST", AL + "/proxy_address", OWN_TASK,
          lambda w, c: {"allocationId": w.ids["bob_allocation"], "proxyAddress": "127.0.0.1"}),
    Route("POST", AL + "/signals/ack_preemption", OWN_TASK,
          lambda w, c: {"allocationId": w.ids["bob_allocation"]}),
    Route("POST", "/api/v1/task/logs", OWN_TASK,
          lambda w, c: {"logs": [{"taskId": w.ids["bob_task_id"], "log": "hello\n"}]}),
    Route("POST", "/api/v1/runs/start", OWNER_AND_OWN_TASK, lambda w, c: {"runId": w.ids["bob_trial"]}),
    # --- unmanaged (core_v2) scripts: their owner's session; Bob's trial here is managed (400)
    Route("PUT", "/api/v1/experiments/by-external-id/<path:external_id>", ANY_USER,
          lambda w, c: {"config": UNMANAGED_CONFIG, "unmanaged": True}),
    Route("GET", "/api/v1/trials/by-external-id/<path:external_id>/<external_trial_id>", ANY_USER),
    Route("POST", "/api/v1/trials", OWNER,
          lambda w, c: {"experimentId": w.ids["bob_experiment"], "unmanaged": True}),
    Route("PUT", "/api/v1/trials", OWNER,
          lambda w, c: {"createTrialRequest": {"experimentId": w.ids["bob_experiment"],
                                               "unmanaged": True}, "externalTrialId": "t"}),
    Route("POST", T + "/start", OWNER, lambda w, c: {"trialId": w.ids["bob_trial"], "resume": True}),
    Route("POST", "/task-logs", OWNER,
          lambda w, c: [{"task_id": w.ids["bob_unmanaged_task_id"], "log": "hello\n"}]),
    Route("POST", T + "/metrics", OWNER_AND_OWN_TASK,
          lambda w, c: {"group": "training", "metrics": _metrics(w, "training", 1)}),
    Route("POST", T + "/metrics/batch", OWNER_AND_OWN_TASK,
          lambda w, c: {"reports": [{"group": "training", **_metrics(w, "training", 2)}]}),
    Route("POST", T + "/training_metrics", OWNER_AND_OWN_TASK, lambda w, c: _metrics(w, "training", 3)),
    Route("POST", T + "/validation_metrics", OWNER_AND_OWN_TASK, lambda w, c: _metrics(w, "validation", 3)),
    Route("POST", T + "/progress", OWNER_AND_OWN_TASK,
          lambda w, c: {"trialId": w.ids["bob_trial"], "progress": 0.25}),
    Route("POST", T + "/runner/metadata", OWNER_AND_OWN_TASK, lambda w, c: {"state": "training"}),
    Route("PATCH", T, OWNER_AND_OWN_TASK, lambda w, c: {"trialId": w.ids["bob_trial"]}),
    Route("POST", "/api/v1/checkpoints", OWNER_AND_OWN_TASK, _ckpt),
    Route("PATCH", "/api/v1/checkpoints", OWNER_AND_OWN_TASK, lambda w, c: {"checkpoints": [
        {"uuid": w.ids["bob_checkpoint"], "resources": {"resources": {"model.pt": 10}}}]}),
    Route("POST", "/api/v1/trial-source-info", OWNER_AND_OWN_TASK,
          lambda w, c: {"trialSourceInfo": {"trialId": w.ids["bob_trial"],
                                            "checkpointUuid": w.ids["bob_checkpoint"],
                                            "trialSourceInfoType": "TRIAL_SOURCE_INFO_TYPE_INFERENCE"}}),
    Route("POST", "/api/v1/runs/<int:run_id>/metadata", OWNER_AND_OWN_TASK,
          lambda w, c: {"runId": w.ids["bob_trial"], "metadata": {"by": c}}),
    Route("POST", "/api/v1/checkpoints/<uid>/metadata", OWNER_AND_OWN_TASK,
          lambda w, c: {"checkpoint": {"uuid": w.ids["bob_checkpoint"], "metadata": {"by": c}}}),
    # --- changes that keep the resources --------------------------------------------------
    Route("POST", "/api/v1/experiments", ANY_USER,
          lambda w, c: {"config": CONFIG.format(name=f"new-{c}"), "activate": False}),
    Route("PATCH", E, EDITOR, lambda w, c: {"id": w.ids["bob_experiment"], "notes": f"by {c}"}),
    Route("PUT", "/api/v1/master/cluster_message", ADMIN, lambda w, c: {"message": f"by {c}"}),
    Route("DELETE", "/api/v1/master/cluster_message", ADMIN),
    Route("PATCH", "/api/v1/master/config", ADMIN, lambda w, c: {
        "config": {"log": {"level": "LOG_LEVEL_INFO"}}, "fieldMask": {"paths": ["log.level"]}}),
    Route("PUT", "/api/v1/master/task-container-policy", ADMIN, lambda w, c: {"policy": {}}),
    Route("PUT", E + "/labels/<path:label>", EDITOR),
    Route("DELETE", E + "/labels/<path:label>", EDITOR),
    Route("POST", E + "/pause", EDITOR),
    Route("POST", E + "/activate", EDITOR),
    Route("POST", E + "/archive", EDITOR),
    Route("POST", E + "/unarchive", EDITOR),
    Route("DELETE", E + "/tensorboard-files", OWNER),
    Route("POST", E + "/move", EDITOR, lambda w, c: {
        "experimentId": w.ids["bob_experiment"], "destinationProjectId": w.ids["bob_project"]}),
    Route("POST", "/api/v1/experiments/continue", EDITOR, lambda w, c: {"id": w.ids["bob_experiment"]}),
    Route("POST", "/api/v1/job-queues", EDITOR,
          lambda w, c: {"updates": [{"jobId": w.ids["bob_job"], "priority": 40}]}),
    Route("POST", "/api/v1/models", ANY_USER, lambda w, c: {"name": f"model-of-{c}"}),
    Route("PATCH", M, OWNER, lambda w, c: {"description": f"by {c}"}),
    Route("POST", M + "/versions", OWNER, lambda w, c: {
        "modelName": "bobs-model", "checkpointUuid": w.ids["bob_checkpoint"]}),
    Route("PATCH", M + "/versions/<int:number>", OWNER, lambda w, c: {"comment": f"by {c}"}),
    Route("POST", M + "/archive", OWNER),
    Route("POST", M + "/unarchive", OWNER),
    Route("POST", M + "/move", OWNER, lambda w, c: {
        "modelName": "bobs-model", "destinationWorkspaceId": w.ids["bob_workspace"]}),
    Route("POST", "/api/v1/workspaces", ANY_USER, lambda w, c: {"name": f"ws-of-{c}"}),
    Route("PATCH", W, OWNER, lambda w, c: {"defaultComputePool": "default"}),
    Route("POST", W + "/archive", OWNER),
    Route("POST", W + "/unarchive", OWNER),
    Route("POST", W + "/projects", ANY_USER, lambda w, c: {
        "name": f"project-of-{c}", "workspaceId": w.ids["bob_workspace"]}),
    Route("PATCH", P, OWNER, lambda w, c: {"description": f"by {c}"}),
    Route("POST", P + "/notes", OWNER, lambda w, c: {"name": "n", "contents": f"by {c}"}),
    Route("PUT", P + "/notes", OWNER, lambda w, c: {
        "projectId": w.ids["bob_project"], "notes": [{"name": "n", "contents": f"by {c}"}]}),
    Route("POST", P + "/archive", OWNER),
    Route("POST", P + "/unarchive", OWNER),
    Route("POST", P + "/move", OWNER, lambda w, c: {
        "projectId": w.ids["bob_project"], "destinationWorkspaceId": w.ids["bob_workspace"]}),
    Route("POST", "/api/v1/templates/<name>", ANY_USER, lambda w, c: {
        "name": f"template-of-{c}", "config": {"description": "x"}, "workspaceId": 1}),
    Route("PUT", "/api/v1/templates/<name>", OWNER, lambda w, c: {
        "name": w.ids["template"], "config": {"description": f"by {c}"}, "workspaceId": 1}),
    Route("PATCH", "/api/v1/templates/<name>", OWNER, lambda w, c: {"description": f"by {c}"}),
    Route("POST", "/api/v1/tokens", OWNER, lambda w, c: {"userId": w.ids["bob_id"]}),
    Route("PATCH", "/api/v1/tokens/<int:token_id>", OWNER,
          lambda w, c: {"tokenId": w.ids["bob_token"], "description": f"by {c}"}),
    Route("POST", "/api/v1/commands", ANY_USER,
          lambda w, c: {"config": {"entrypoint": ["true"], "resources": {"slots": 0}}}),
    Route("POST", "/api/v1/commands/<command_id>/set_priority", EDITOR,
          lambda w, c: {"commandId": w.ids["bob_command"], "priority": 30}),
    Route("POST", "/api/v1/notebooks", ANY_USER,
          lambda w, c: {"config": {"resources": {"slots": 0}}}),
    Route("POST", "/api/v1/notebooks/<notebook_id>/set_priority", EDITOR,
          lambda w, c: {"notebookId": w.ids["bob_notebook"], "priority": 30}),
    Route("POST", "/api/v1/shells", ANY_USER,
          lambda w, c: {"config": {"resources": {"slots": 0}}}),
    Route("POST", "/api/v1/shells/<shell_id>/set_priority", EDITOR,
          lambda w, c: {"shellId": w.ids["bob_shell"], "priority": 30}),
    Route("POST", "/api/v1/tensorboards", ANY_USER, lambda w, c: {
        "experimentIds": [w.ids["bob_experiment"]], "config": {"resources": {"slots": 0}}}),
    Route("POST", "/api/v1/tensorboards/<tensorboard_id>/set_priority", EDITOR,
          lambda w, c: {"tensorboardId": w.ids["bob_tensorboard"], "priority": 30}),
    Route("POST", "/api/v1/users", ADMIN, lambda w, c: {
        "user": {"username": f"user-by-{c}", "active": True}, "password": "Pw-of-a-new-user-1"}),
    Route("PATCH", "/api/v1/users/<int:user_id>", OWNER, lambda w, c: {"displayName": f"Bob by {c}"}),
    Route("POST", AG + "/disable", ADMIN, lambda w, c: {"agentId": "sim-idle"}),
    Route("POST", AG + "/enable", ADMIN),
    Route("POST", AG + "/slots/<slot_id>/disable", ADMIN, lambda w, c: {"agentId": "sim-idle"}),
    Route("POST", AG + "/slots/<slot_id>/enable", ADMIN),
    Route("POST", AG + "/heartbeat", "DDDDDD", lambda w, c: {"slots": []}),
    Route("GET", AG + "/changes", "DDDDDD", params={"timeoutSeconds": 0}),
    # --- what ends resources or sessions ----------------------------------------------------
    Route("POST", AL + "/signals/pending_preemption", OWN_TASK,
          lambda w, c: {"allocationId": w.ids["bob_allocation"]}),
    Route("POST", T + "/early_exit", OWNER_AND_OWN_TASK,
          lambda w, c: {"reason": "EXITED_REASON_USER_REQUESTED_STOP"}),
    Route("POST", T + "/kill", EDITOR),
    Route("POST", "/api/v1/commands/<command_id>/kill", EDITOR),
    Route("POST", "/api/v1/notebooks/<notebook_id>/kill", EDITOR),
    Route("POST", "/api/v1/shells/<shell_id>/kill", EDITOR),
    Route("POST", "/api/v1/tensorboards/<tensorboard_id>/kill", EDITOR),
    Route("POST", "/api/v1/proxy_tickets", OWNER, lambda w, c: {"taskId": w.ids["bob_notebook"]}),
    Route("POST", E + "/cancel", EDITOR),
    Route("POST", E + "/kill", EDITOR),
    # a glob that names no file: an allowed call queues a GC run that removes nothing
    Route("POST", "/api/v1/checkpoints/rm", OWNER,
          lambda w, c: {"checkpointUuids": [w.ids["bob_checkpoint"]],
                        "checkpointGlobs": ["no-such-file"]}),
    Route("PUT", E + "/retain_logs", OWNER, lambda w, c: {"numDays": 30}),
    Route("PUT", T + "/retain_logs", OWNER, lambda w, c: {"numDays": 30}),
    Route("POST", "/api/v1/cleanup_logs", ADMIN),
    Route("DELETE", "/api/v1/checkpoints", OWNER,
          lambda w, c: {"checkpointUuids": [w.ids["bob_checkpoint"]]}),
    Route("DELETE", M + "/versions/<int:number>", OWNER),
    Route("DELETE", M, OWNER),
    Route("PATCH", "/api/v1/template/rename", OWNER,
          lambda w, c: {"oldName": w.ids["template"], "newName": w.ids["template"] + "-r"}),
    Route("DELETE", "/api/v1/templates/<name>", OWNER),
    Route("DELETE", "/api/v1/webhooks/<int:webhook_id>", OWNER),
    Route("DELETE", E, OWNER),
    Route("DELETE", P, OWNER),
    Route("DELETE", W, OWNER),
    Route("POST", "/api/v1/users/<int:user_id>/password", OWNER,
          lambda w, c: client_hash(PASSWORDS["bob"]), fresh=True),
    Route("POST", "/api/v1/auth/logout", "DAAADD", fresh=True),
]
# fmt: on


def _path(w: World, route: Route, caller: str) -> str:
    ids = w.ids
    rule = route.rule
    if rule.startswith("/api/v1/templates/<name>"):
        name = {"POST": f"template-of-{caller}", "DELETE": "template-of-bob"}.get(
            route.method, ids["template"]
        )
    elif rule.startswith("/api/v1/resource-pools/"):
        name = "default"
    elif rule.startswith("/det/static/"):
        name = "app.js"
    else:
        name = "bobs-model"
    values = {
        "experiment_id": ids["bob_experiment"], "trial_id": ids["bob_trial"],
        "run_id": ids["bob_trial"],
        "allocation_id": ids["bob_allocation"], "task_id": ids["bob_task_id"],
        "uid": ids["bob_checkpoint"], "agent_id": "sim-idle", "slot_id": "0", "name": name,
        "number": 1, "user_id": ids["bob_id"], "username": "bob", "label": "l",
        "project_id": ids["bob_project"], "workspace_id": ids["bob_workspace"],
        "key": ids["bob_project_key"], "token_id": ids["bob_token"], "page": "experiments", "command_id": ids["bob_command"],
        "notebook_id": ids["bob_notebook"], "shell_id": ids["bob_shell"],
        "tensorboard_id": ids["bob_tensorboard"], "external_id": "a-run",
        "external_trial_id": "t",
        "webhook_id": ids["bob_webhook"], "group_id": 987654,
    }  # fmt: skip
    if rule.startswith("/api/v1/trials/by-external-id/"):
        values["external_id"] = "bobs-unmanaged"  # bob's unmanaged trial, external id "t"
    path = rule
    for key, value in values.items():
        for conv in ("int:", "path:", ""):
            path = path.replace(f"<{conv}{key}>", str(value))
    assert "<" not in path, f"no value for a placeholder of {rule}"
    return path


def _call(w: World, route: Route, caller: str) -> requests.Response:
    body = route.body(w, caller) if route.body else None
    r = requests.request(
        route.method, w.m.url + _path(w, route, caller),
        json=body if route.method != "GET" else None,
        params=route.params, headers=w.headers(caller, fresh=route.fresh), timeout=30, stream=True,
    )  # fmt: skip
    r.close()
    return r


def _app_routes() -> set[tuple[str, str]]:
    app = Flask("routes")
    for bp in BLUEPRINTS:
        app.register_blueprint(bp)
    return {
        (method, rule.rule)
        for rule in app.url_map.iter_rules()
        if rule.endpoint != "static"
        for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}
    }


def test_the_table_lists_every_route_once() -> None:
    listed = [(r.method, r.rule) for r in ROUTES]
    assert len(listed) == len(set(listed)), "a route is listed twice"
    assert all(len(r.expect) == len(CALLERS) and set(r.expect) <= {"A", "D"} for r in ROUTES)
    missing = _app_routes() - set(listed)
    assert not missing, f"routes with no row in ROUTES (say who may call them): {sorted(missing)}"
    gone = set(listed) - _app_routes()
    assert not gone, f"rows for routes the master no longer has: {sorted(gone)}"


@pytest.mark.parametrize("route", ROUTES, ids=[f"{r.method} {r.rule}" for r in ROUTES])
def test_each_caller_gets_what_the_table_says(world: World, route: Route) -> None:
    order = sorted(range(len(CALLERS)), key=lambda i: route.expect[i] == "A")  # refusals first
    wrong = []
    for i in order:
        caller, expected = CALLERS[i], route.expect[i]
        status = _call(world, route, caller).status_code
        if status >= 500:
            wrong.append(f"{caller}: {status} (a server error)")
        elif expected == "D":
            refused = status == 401 if caller == "nobody" else status in (401, 403)
            if not refused:
                wrong.append(f"{caller}: {status}, expected a refusal")
        elif status in (401, 403) or (route.method == "GET" and status != route.read_ok):
            wrong.append(f"{caller}: {status}, expected it allowed")
    assert not wrong, f"{route.method} {route.rule}: " + "; ".join(wrong)
