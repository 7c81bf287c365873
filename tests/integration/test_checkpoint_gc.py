"""Checkpoint GC after an experiment ends: the retention policy decides, a task deletes. On the
master's app in the test's process with its control loop (``loop_master``) and SimAgents."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.fakes.sim_agent import SimAgent
from tests.integration.conftest import wait_for
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration

CONFIG = """
name: gc
entrypoint: python3 train.py
searcher: {name: single, metric: validation_loss}
hyperparameters: {lr: 0.5}
"""


def states_by_step(m: InProcessMaster, eid: int) -> dict[int, str]:
    return {
        int(c["metadata"]["steps_completed"]): c["state"]
        for c in m.get(f"/api/v1/experiments/{eid}/checkpoints")["checkpoints"]
    }


def create_and_complete(m: InProcessMaster, config: str) -> int:
    """Creates an experiment and waits until it has COMPLETED (an agent must be running)."""
    eid = int(
        m.post("/api/v1/experiments", {"config": config, "activate": True})["experiment"]["id"]
    )
    wait_for(
        lambda: m.get(f"/api/v1/experiments/{eid}")["experiment"]["state"] == "STATE_COMPLETED",
        60,
        what="the experiment",
    )
    return eid


def run(m: InProcessMaster, config: str) -> int:
    agent = SimAgent(m.url, m.agent_token, "sim-gc").start()
    try:
        eid = create_and_complete(m, config)
        # The simulated trial checkpoints and validates at steps 2, 4, 6, 8 (loss falling).
        wait_for(
            lambda: "STATE_DELETED" in states_by_step(m, eid).values(), 30, what="the checkpoint GC"
        )
    finally:
        agent.stop()
    return eid


def test_the_default_policy_keeps_the_best_and_latest(
    loop_master: InProcessMaster, pg_url: str
) -> None:
    eid = run(loop_master, CONFIG)
    assert states_by_step(loop_master, eid) == {
        2: "STATE_DELETED",
        4: "STATE_DELETED",
        6: "STATE_DELETED",
        8: "STATE_COMPLETED",
    }
    with psycopg.connect(pg_url) as conn:
        gc = conn.execute(
            "SELECT a.state, a.exit_code, a.slots_needed FROM allocations a"
            " JOIN checkpoint_gc g ON g.allocation_id = a.id WHERE g.experiment_id = %s",
            (eid,),
        ).fetchall()
        events = [
            r[0]
            for r in conn.execute(
                "SELECT message FROM events WHERE entity = 'experiment' AND entity_id = %s"
                " AND kind = 'checkpoint-gc' ORDER BY id",
                (str(eid),),
            )
        ]
    assert gc == [("TERMINATED", 0, 0)]
    assert events == ["deleting 3 checkpoints", "deleted 3 checkpoints"]


def test_the_policy_comes_from_checkpoint_storage(
    loop_master: InProcessMaster, tmp_path: Any
) -> None:
    config = CONFIG + (
        f"checkpoint_storage: {{type: shared_fs, host_path: {tmp_path}, save_trial_best: 0,"
        " save_trial_latest: 2}\n"
    )
    eid = run(loop_master, config)
    assert states_by_step(loop_master, eid) == {
        2: "STATE_DELETED",
        4: "STATE_DELETED",
        6: "STATE_COMPLETED",
        8: "STATE_COMPLETED",
    }


def test_nothing_to_delete_queues_no_task(
    loop_master: InProcessMaster, pg_url: str, tmp_path: Any
) -> None:
    config = CONFIG + (
        f"checkpoint_storage: {{type: shared_fs, host_path: {tmp_path}, save_trial_latest: 10}}\n"
    )
    agent = SimAgent(loop_master.url, loop_master.agent_token, "sim-keep").start()
    try:
        eid = create_and_complete(loop_master, config)

        def decided() -> bool:
            with psycopg.connect(pg_url) as conn:
                row = conn.execute(
                    "SELECT checkpoint_gc_at IS NOT NULL FROM experiments WHERE id = %s", (eid,)
                ).fetchone()
            return bool(row and row[0])

        wait_for(decided, 30, what="the GC decision")
    finally:
        agent.stop()
    assert set(states_by_step(loop_master, eid).values()) == {"STATE_COMPLETED"}
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM checkpoint_gc").fetchone() == (0,)


def test_checkpoints_in_the_model_registry_are_kept(loop_master: InProcessMaster) -> None:
    import threading

    from tests.fakes.sim_agent import default_training

    gate = threading.Event()

    def train(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        code = default_training(master, spec, killed)
        gate.wait(30)  # the test registers a model version before the trial ends
        return code

    agent = SimAgent(loop_master.url, loop_master.agent_token, "sim-reg", train=train).start()
    try:
        eid = loop_master.post("/api/v1/experiments", {"config": CONFIG, "activate": True})[
            "experiment"
        ]["id"]
        wait_for(lambda: len(states_by_step(loop_master, eid)) == 4, 30, what="4 checkpoints")
        (step2,) = [
            c["uuid"]
            for c in loop_master.get(f"/api/v1/experiments/{eid}/checkpoints")["checkpoints"]
            if c["metadata"]["steps_completed"] == 2
        ]
        loop_master.post("/api/v1/models", {"name": "keeper"})
        loop_master.post("/api/v1/models/keeper/versions", {"checkpointUuid": step2})
        gate.set()
        wait_for(
            lambda: "STATE_DELETED" in states_by_step(loop_master, eid).values(), 60, what="GC"
        )
    finally:
        gate.set()
        agent.stop()
    assert states_by_step(loop_master, eid) == {
        2: "STATE_COMPLETED",
        4: "STATE_DELETED",
        6: "STATE_DELETED",
        8: "STATE_COMPLETED",
    }


def test_deleting_an_experiment_deletes_all_its_checkpoints(loop_master: InProcessMaster) -> None:
    eid = run(loop_master, CONFIG)  # the end-of-experiment GC kept step 8
    r = loop_master.session().delete(f"{loop_master.url}/api/v1/experiments/{eid}", timeout=10)
    assert r.status_code == 200, r.text
    agent = SimAgent(loop_master.url, loop_master.agent_token, "sim-del").start()  # runs the GC

    def all_deleted() -> bool:
        with psycopg.connect(loop_master.db_url) as conn:
            rows = conn.execute(
                "SELECT c.state FROM checkpoints c JOIN trials t ON t.id = c.trial_id"
                " WHERE t.experiment_id = %s",
                (eid,),
            ).fetchall()
        return bool(rows) and all(s == "DELETED" for (s,) in rows)

    try:
        wait_for(all_deleted, 30, what="the deleted experiment's checkpoints to go")
    finally:
        agent.stop()


def test_a_gc_whose_agent_is_lost_runs_again_on_another(
    loop_master: InProcessMaster, pg_url: str
) -> None:
    import threading

    gc_held = threading.Event()

    class Vanishing(SimAgent):
        """Trains as usual, takes the GC task and then vanishes without running it."""

        def _run(self, task: Any) -> None:
            if task.spec.get("taskType") == "CHECKPOINT_GC":
                gc_held.set()
                task.killed.wait(120)
                return
            super()._run(task)

    first = Vanishing(loop_master.url, loop_master.agent_token, "sim-vanishing").start()
    try:
        eid = create_and_complete(loop_master, CONFIG)
        wait_for(gc_held.is_set, 30, what="the GC task on the first agent")
    finally:
        first.stop()  # no more heartbeats: the master declares it lost

    def lost_run_ended() -> bool:
        with psycopg.connect(pg_url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM allocations WHERE task_id = %s AND exit_reason = 'agent lost'",
                (f"gc.{eid}",),
            ).fetchone()
        return bool(row and row[0] == 1)

    wait_for(lost_run_ended, 60, what="the lost agent's GC run to end")
    assert set(states_by_step(loop_master, eid).values()) == {"STATE_COMPLETED"}  # not run yet
    second = SimAgent(loop_master.url, loop_master.agent_token, "sim-after-loss").start()
    try:
        wait_for(
            lambda: list(states_by_step(loop_master, eid).values()).count("STATE_DELETED") == 3,
            60,
            what="the GC run again by the second agent",
        )
    finally:
        second.stop()
    assert states_by_step(loop_master, eid)[8] == "STATE_COMPLETED"
    with psycopg.connect(pg_url) as conn:
        events = [
            r[0]
            for r in conn.execute(
                "SELECT message FROM events WHERE entity = 'experiment' AND entity_id = %s"
                " AND kind LIKE 'checkpoint-gc%%' ORDER BY id",
                (str(eid),),
            )
        ]
    assert events == [
        "deleting 3 checkpoints",
        "checkpoint GC interrupted: its agent was lost; it is queued again",
        "deleting 3 checkpoints",
        "deleted 3 checkpoints",
    ]
