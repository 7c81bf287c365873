"""Ownership and roles for every write (det.master.api._access), on the master's app in the
test's process with its control loop (``loop_master``: the SimAgent's calls reach the app).

Bob owns an experiment with a running trial; Eve is another user with her own running trial;
the admin may change anything. Each refused request must change nothing in the database.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests

from tests.fakes.sim_agent import SimAgent, wait
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration

CONFIG = """
name: {name}
entrypoint: x
searcher: {{name: single, metric: loss, max_length: 10}}
"""


@dataclass
class Run:
    experiment_id: int
    trial_id: int
    task_id: str
    allocation_id: str
    task_token: str
    checkpoint: str


@dataclass
class World:
    m: InProcessMaster
    db_url: str
    bob: requests.Session
    eve: requests.Session
    admin: requests.Session
    bob_run: Run
    eve_run: Run


def _task_session(token: str) -> requests.Session:
    s = requests.Session()
    s.headers["Grpc-Metadata-x-allocation-token"] = f"Bearer {token}"
    return s


@pytest.fixture
def world(loop_master: InProcessMaster, pg_url: str) -> Iterator[World]:
    m = loop_master
    for name in ("bob", "eve"):
        m.post("/api/v1/users", {"user": {"username": name}, "password": f"{name}-pw-123"})
    bob = m.session(m.login("bob", "bob-pw-123"))
    eve = m.session(m.login("eve", "eve-pw-123"))
    specs: dict[int, dict[str, Any]] = {}
    release = threading.Event()

    def hold(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        specs[int(spec["env"]["DET_TRIAL_ID"])] = spec
        release.wait(120)
        return 0

    agent = SimAgent(m.url, m.agent_token, "sim-0", slots=2, train=hold).start()
    runs: list[Run] = []
    try:
        for who, name in ((bob, "bobs"), (eve, "eves")):
            r = who.post(
                m.url + "/api/v1/experiments",
                json={"config": CONFIG.format(name=name), "activate": True},
                timeout=30,
            )
            assert r.status_code == 200, r.text
            eid = int(r.json()["experiment"]["id"])
            n = len(runs) + 1
            wait(lambda n=n: len(specs) == n, 60, f"experiment {eid}'s trial running")  # type: ignore[misc]
            seen = {x.trial_id for x in runs}
            env = next(s["env"] for t, s in specs.items() if t not in seen)
            ckpt = str(uuid.uuid4())
            task = _task_session(env["DET_SESSION_TOKEN"])
            r = task.post(
                m.url + "/api/v1/checkpoints",
                json={
                    "checkpoint": {
                        "uuid": ckpt,
                        "taskId": env["DET_TASK_ID"],
                        "allocationId": env["DET_ALLOCATION_ID"],
                        "resources": {"model.pt": 10},
                        "metadata": {"steps_completed": 5},
                    }
                },
                timeout=10,
            )
            assert r.status_code == 200, r.text
            runs.append(
                Run(
                    eid,
                    int(env["DET_TRIAL_ID"]),
                    env["DET_TASK_ID"],
                    env["DET_ALLOCATION_ID"],
                    env["DET_SESSION_TOKEN"],
                    ckpt,
                )
            )
        yield World(m, pg_url, bob, eve, m.session(), runs[0], runs[1])
    finally:
        release.set()
        agent.stop()


def _db(w: World, sql: str, *params: Any) -> Any:
    import psycopg

    with psycopg.connect(w.db_url) as conn:
        row = conn.execute(sql, params).fetchone()
    return row[0] if row else None


def test_another_user_cannot_report_metrics_into_my_trial(world: World) -> None:
    w = world
    r = w.eve.post(
        f"{w.m.url}/api/v1/trials/{w.bob_run.trial_id}/metrics",
        json={
            "group": "validation",
            "metrics": {
                "stepsCompleted": 1,
                "metrics": {"avgMetrics": {"loss": -1000}},
                "trialRunId": 1,
            },
        },
        timeout=10,
    )
    assert r.status_code == 403, r.text
    assert "bob" in r.json()["message"]
    assert _db(w, "SELECT count(*) FROM metrics WHERE trial_id = %s", w.bob_run.trial_id) == 0


@pytest.mark.parametrize("action", ["kill", "early_exit"])
def test_another_user_cannot_stop_my_trial(world: World, action: str) -> None:
    """Eve with no role in Bob's (now private, issue 40) workspace: killing is an Editor's
    (every user's in an open workspace: test_workspace_roles.py), an early exit the owner's."""
    w = world
    admin_id = w.admin.get(f"{w.m.url}/api/v1/me", timeout=10).json()["user"]["id"]
    _assign(w, 4, admin_id, 1)  # Viewer (4) on the default workspace: a team space now
    body = {"reason": "EXITED_REASON_USER_REQUESTED_STOP"} if action == "early_exit" else {}
    r = w.eve.post(f"{w.m.url}/api/v1/trials/{w.bob_run.trial_id}/{action}", json=body, timeout=10)
    assert r.status_code == 403, r.text
    assert _db(w, "SELECT state FROM trials WHERE id = %s", w.bob_run.trial_id) == "ACTIVE"


def test_another_user_cannot_inject_a_checkpoint_into_my_trial(world: World) -> None:
    w = world
    evil = str(uuid.uuid4())
    r = w.eve.post(
        f"{w.m.url}/api/v1/checkpoints",
        json={
            "checkpoint": {
                "uuid": evil,
                "taskId": w.bob_run.task_id,
                "resources": {},
                "metadata": {"steps_completed": 999},
            }
        },
        timeout=10,
    )
    assert r.status_code == 403, r.text
    assert _db(w, "SELECT count(*) FROM checkpoints WHERE uuid = %s", evil) == 0
    assert (
        str(_db(w, "SELECT latest_checkpoint FROM trials WHERE id = %s", w.bob_run.trial_id))
        == w.bob_run.checkpoint
    )


def test_another_user_cannot_rewrite_my_checkpoint(world: World) -> None:
    w = world
    r = w.eve.patch(
        f"{w.m.url}/api/v1/checkpoints",
        json={"checkpoints": [{"uuid": w.bob_run.checkpoint, "resources": {"resources": {}}}]},
        timeout=10,
    )
    assert r.status_code == 403, r.text
    assert (
        _db(w, "SELECT state FROM checkpoints WHERE uuid = %s", w.bob_run.checkpoint) == "COMPLETED"
    )


def _assign(w: World, role_id: int, user_id: int, workspace_id: int) -> None:
    ra = {"role": {"roleId": role_id}, "scopeWorkspaceId": workspace_id}
    r = w.admin.post(
        f"{w.m.url}/api/v1/roles/add-assignments",
        json={"userRoleAssignments": [{"userId": user_id, "roleAssignment": ra}]},
        timeout=10,
    )
    assert r.status_code == 200, r.text


def test_only_the_workspaces_editors_and_admins_change_my_jobs_priority(world: World) -> None:
    """Bob's experiment is in the default workspace; made private (a role assigned on it, issue
    40), Eve, with no role there, may not reprioritise his job; an Editor of it may, as an
    admin may (in an open workspace every user is an Editor: test_workspace_roles.py)."""
    w = world
    admin_id = w.admin.get(f"{w.m.url}/api/v1/me", timeout=10).json()["user"]["id"]
    eve_id = w.eve.get(f"{w.m.url}/api/v1/me", timeout=10).json()["user"]["id"]
    _assign(w, 4, admin_id, 1)  # Viewer (4): the default workspace is now a team space
    job_id = _db(w, "SELECT job_id FROM allocations WHERE id = %s", w.bob_run.allocation_id)
    before = _db(w, "SELECT priority FROM jobs WHERE id = %s", job_id)
    r = w.eve.post(
        f"{w.m.url}/api/v1/job-queues",
        json={"updates": [{"jobId": job_id, "priority": 99}]},
        timeout=10,
    )
    assert r.status_code == 403, r.text
    assert _db(w, "SELECT priority FROM jobs WHERE id = %s", job_id) == before
    r = w.admin.post(
        f"{w.m.url}/api/v1/job-queues",
        json={"updates": [{"jobId": job_id, "priority": 7}]},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    assert _db(w, "SELECT priority FROM jobs WHERE id = %s", job_id) == 7
    _assign(w, 5, eve_id, 1)  # Editor (5)
    r = w.eve.post(
        f"{w.m.url}/api/v1/job-queues",
        json={"updates": [{"jobId": job_id, "priority": 9}]},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    assert _db(w, "SELECT priority FROM jobs WHERE id = %s", job_id) == 9


def test_another_user_cannot_register_versions_of_my_model(world: World) -> None:
    w = world
    assert (
        w.bob.post(f"{w.m.url}/api/v1/models", json={"name": "bobs-model"}, timeout=10).status_code
        == 200
    )
    r = w.eve.post(
        f"{w.m.url}/api/v1/models/bobs-model/versions",
        json={"checkpointUuid": w.eve_run.checkpoint},
        timeout=10,
    )
    assert r.status_code == 403, r.text
    assert _db(w, "SELECT count(*) FROM model_versions") == 0
    r = w.bob.post(
        f"{w.m.url}/api/v1/models/bobs-model/versions",
        json={"checkpointUuid": w.bob_run.checkpoint},
        timeout=10,
    )
    assert r.status_code == 200, r.text


def test_another_user_cannot_long_poll_my_allocation(world: World) -> None:
    w = world
    r = w.eve.get(
        f"{w.m.url}/api/v1/allocations/{w.bob_run.allocation_id}/signals/preemption",
        params={"timeout_seconds": 1},
        timeout=10,
    )
    assert r.status_code == 403, r.text


def test_a_task_token_cannot_overwrite_delete_or_read_another_experiments_checkpoint(
    world: World,
) -> None:
    w = world
    eve_task = _task_session(w.eve_run.task_token)
    r = eve_task.post(
        f"{w.m.url}/api/v1/checkpoints",
        json={
            "checkpoint": {
                "uuid": w.bob_run.checkpoint,
                "resources": {"x": 1},
                "metadata": {"steps_completed": 1},
            }
        },
        timeout=10,
    )
    assert r.status_code == 403, r.text
    assert (
        _db(w, "SELECT resources::text FROM checkpoints WHERE uuid = %s", w.bob_run.checkpoint)
        == '{"model.pt": 10}'
    )
    r = eve_task.patch(
        f"{w.m.url}/api/v1/checkpoints",
        json={"checkpoints": [{"uuid": w.bob_run.checkpoint, "resources": {"resources": {}}}]},
        timeout=10,
    )
    assert r.status_code == 403, r.text
    assert (
        _db(w, "SELECT state FROM checkpoints WHERE uuid = %s", w.bob_run.checkpoint) == "COMPLETED"
    )
    assert (
        eve_task.get(f"{w.m.url}/api/v1/checkpoints/{w.bob_run.checkpoint}", timeout=10).status_code
        == 403
    )
    # Its own checkpoint it reads, and the owner reads everything.
    assert (
        eve_task.get(f"{w.m.url}/api/v1/checkpoints/{w.eve_run.checkpoint}", timeout=10).status_code
        == 200
    )
    assert (
        w.bob.get(f"{w.m.url}/api/v1/checkpoints/{w.eve_run.checkpoint}", timeout=10).status_code
        == 200
    )


def test_the_owners_own_task_reports_and_the_owner_kills(world: World) -> None:
    w = world
    bob_task = _task_session(w.bob_run.task_token)
    r = bob_task.post(
        f"{w.m.url}/api/v1/trials/{w.bob_run.trial_id}/metrics",
        json={
            "group": "training",
            "metrics": {
                "stepsCompleted": 1,
                "metrics": {"avgMetrics": {"loss": 0.5}},
                "trialRunId": 1,
            },
        },
        timeout=10,
    )
    assert r.status_code == 200, r.text
    assert (
        w.bob.post(f"{w.m.url}/api/v1/trials/{w.bob_run.trial_id}/kill", timeout=10).status_code
        == 200
    )


def test_runner_metadata_of_a_missing_trial_is_404(world: World) -> None:
    r = world.bob.post(f"{world.m.url}/api/v1/trials/999999/runner/metadata", json={}, timeout=10)
    assert r.status_code == 404, r.text


def test_a_private_workspaces_checkpoint_is_its_members_to_read(world: World) -> None:
    """Issue 40: once Bob's (default) workspace is private, Eve, with no role there, is refused
    his checkpoint by uuid; Bob and an admin read it."""
    w = world
    admin_id = w.admin.get(f"{w.m.url}/api/v1/me", timeout=10).json()["user"]["id"]
    uid = w.bob_run.checkpoint
    assert w.eve.get(f"{w.m.url}/api/v1/checkpoints/{uid}", timeout=10).status_code == 200
    _assign(w, 4, admin_id, 1)
    r = w.eve.get(f"{w.m.url}/api/v1/checkpoints/{uid}", timeout=10)
    assert r.status_code == 403, r.text
    assert f"checkpoint {uid} is in workspace 'Uncategorized'" in r.json()["message"]
    for s in (w.bob, w.admin):
        assert s.get(f"{w.m.url}/api/v1/checkpoints/{uid}", timeout=10).status_code == 200
