"""A trial on two agents is one trial (issue 38, finding 3): the master tells each container of
the gang where the others are and which is the chief's, and refuses a training report from any
other container, ending the trial ERROR with the launcher to use (real PostgreSQL, the master's
app and control loop in the test's process, ``loop_master``, simulated agents that only capture
their container specs)."""

from __future__ import annotations

import json
import threading
from typing import Any

import psycopg
import requests

from tests.integration.inproc import InProcessMaster

CONFIG = """
name: two-agents
entrypoint: python3 train.py
resources: {slots_per_trial: 2}
searcher: {name: single, metric: loss, max_length: {batches: 10}}
max_restarts: 3
"""


def _report(master: InProcessMaster, env: dict[str, Any], batches: int) -> requests.Response:
    h = {"Grpc-Metadata-x-allocation-token": f"Bearer {env['DET_SESSION_TOKEN']}"}
    body = {
        "metrics": {
            "trialId": int(env["DET_TRIAL_ID"]),
            "trialRunId": int(env["DET_TRIAL_RUN_ID"]),
            "stepsCompleted": batches,
            "metrics": {"avgMetrics": {"loss": 1.0}},
        },
        "group": "training",
    }
    return requests.post(
        f"{master.url}/api/v1/trials/{env['DET_TRIAL_ID']}/metrics",
        json=body,
        headers=h,
        timeout=10,
    )


def test_a_trial_on_two_agents_has_one_chief_and_refuses_a_second(
    loop_master: InProcessMaster, pg_url: str
) -> None:
    from tests.fakes.sim_agent import SimAgent, wait

    specs: dict[str, dict[str, Any]] = {}
    done = threading.Event()

    def capture(agent_id: str) -> Any:
        def train(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
            specs[agent_id] = spec
            while not (done.is_set() or killed.is_set()):
                killed.wait(0.1)
            return 137 if killed.is_set() else 0

        return train

    agents = [
        SimAgent(loop_master.url, loop_master.agent_token, a, slots=1, train=capture(a)).start()
        for a in ("sim-b", "sim-a")
    ]
    try:
        loop_master.post("/api/v1/experiments", {"config": CONFIG, "activate": True})
        wait(lambda: len(specs) == 2, 30, "a container on each agent")
        chief, worker = specs["sim-a"]["env"], specs["sim-b"]["env"]
        # The gang, in the same order in both containers: sim-a's is the chief's.
        for env in (chief, worker):
            assert json.loads(env["DET_CONTAINER_SLOT_COUNTS"]) == [1, 1]
            assert len(json.loads(env["DET_CONTAINER_ADDRS"])) == 2
        assert chief["DET_CONTAINER_ADDRS"] == worker["DET_CONTAINER_ADDRS"]
        assert (chief["DET_CONTAINER_RANK"], worker["DET_CONTAINER_RANK"]) == ("0", "1")
        assert len(specs["sim-a"]["slotIds"]) == len(specs["sim-b"]["slotIds"]) == 1
        tid = int(chief["DET_TRIAL_ID"])

        # The chief reports; the worker may read its trial (its Core API does).
        assert _report(loop_master, chief, 5).status_code == 200
        h = {"Grpc-Metadata-x-allocation-token": f"Bearer {worker['DET_SESSION_TOKEN']}"}
        got = requests.get(f"{loop_master.url}/api/v1/trials/{tid}", headers=h, timeout=10)
        assert got.status_code == 200, got.text

        # The worker's container reports as if it were the chief: refused, the trial fails.
        second = _report(loop_master, worker, 5)
        assert second.status_code == 409, second.text
        message = second.json()["message"]
        assert "container 1" in message and "determined.launch.torch_distributed" in message
        trial = loop_master.get(f"/api/v1/trials/{tid}")["trial"]
        assert trial["state"] == "STATE_ERROR"
        # And again: refused, recorded once (below). 409 while the allocation lives; 401 once
        # the loop has ended it (its token revoked), which a loaded machine reaches first.
        assert _report(loop_master, worker, 10).status_code in (401, 409)
        with psycopg.connect(pg_url) as conn:
            rows = conn.execute(
                "SELECT count(*) FROM metrics WHERE trial_id = %s", (tid,)
            ).fetchone()
            killed = conn.execute(
                "SELECT bool_and(kill_requested) FROM allocations WHERE trial_id = %s", (tid,)
            ).fetchone()
            logged = conn.execute(
                "SELECT log FROM task_logs WHERE task_id = %s AND source = 'master'",
                (trial["taskId"],),
            ).fetchall()
        assert rows is not None and rows[0] == 1  # the chief's only
        assert killed is not None and killed[0] is True
        assert len(logged) == 1 and "determined.launch.torch_distributed" in logged[0][0]
        # The run ends (both containers killed) and no restart repeats it.
        wait(lambda: all(not a.tasks for a in agents), 60, "both containers to be killed")
        exp = loop_master.get(f"/api/v1/trials/{tid}")["trial"]
        assert exp["state"] == "STATE_ERROR" and exp["restarts"] == 0
    finally:
        done.set()
        for a in agents:
            a.stop()


def test_a_run_on_two_agents_ends_with_its_last_container(loop_master: InProcessMaster) -> None:
    """A worker done first must not end the run while the chief still saves its last
    checkpoint: the allocation ends when both containers exited cleanly; the trial completes."""
    from tests.fakes.sim_agent import SimAgent, wait

    specs: dict[str, dict[str, Any]] = {}
    release = {a: threading.Event() for a in ("sim-a", "sim-b")}

    def capture(agent_id: str) -> Any:
        def train(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
            specs[agent_id] = spec
            while not (release[agent_id].is_set() or killed.is_set()):
                killed.wait(0.1)
            return 137 if killed.is_set() else 0

        return train

    agents = [
        SimAgent(loop_master.url, loop_master.agent_token, a, slots=1, train=capture(a)).start()
        for a in ("sim-a", "sim-b")
    ]
    try:
        loop_master.post("/api/v1/experiments", {"config": CONFIG, "activate": True})
        wait(lambda: len(specs) == 2, 30, "a container on each agent")
        tid = int(specs["sim-a"]["env"]["DET_TRIAL_ID"])
        # Running as the master sees it (a container reported RUNNING) before the worker ends:
        # a container started is not yet reported (a fresh machine's run failed the check below
        # on STATE_QUEUED, the worker released before either agent's next heartbeat).
        wait(
            lambda: loop_master.get(f"/api/v1/trials/{tid}")["trial"]["state"] == "STATE_RUNNING",
            30,
            "the trial to run",
        )
        release["sim-b"].set()  # the worker's container exits 0
        wait(lambda: _exited(agents[1]), 30, "the worker to exit")
        chief = next(iter(agents[0].tasks.values()))
        for _ in range(10):  # heartbeats go by: the chief's container is not killed
            assert not chief.killed.is_set()
            assert loop_master.get(f"/api/v1/trials/{tid}")["trial"]["state"] == "STATE_RUNNING"
            threading.Event().wait(0.2)
        release["sim-a"].set()
        wait(
            lambda: loop_master.get(f"/api/v1/trials/{tid}")["trial"]["state"] == "STATE_COMPLETED",
            60,
            "the trial to complete",
        )
    finally:
        for e in release.values():
            e.set()
        for a in agents:
            a.stop()


def _exited(agent: Any) -> bool:
    from det.common.states import AllocationState

    return bool(agent.tasks) and all(
        t.state == AllocationState.TERMINATED for t in agent.tasks.values()
    )
