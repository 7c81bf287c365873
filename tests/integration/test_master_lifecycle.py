"""Experiments run end to end on the master's app and control loop in the test's process
(``loop_master``) with simulated agents (no Docker)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import requests

from tests.fakes.sim_agent import SimAgent, wait
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration


def create(
    master: InProcessMaster, config: str, files: dict[str, str] | None = None, activate: bool = True
) -> int:
    body = {
        "config": config,
        "modelDefinition": [
            {"path": p, "type": 48, "content": base64.b64encode(c.encode()).decode(), "mode": 0o644}
            for p, c in (files or {"train.py": "print(1)\n"}).items()
        ],
        "activate": activate,
    }
    return int(master.post("/api/v1/experiments", body)["experiment"]["id"])


def exp_state(master: InProcessMaster, eid: int) -> str:
    return str(master.get(f"/api/v1/experiments/{eid}")["experiment"]["state"])


def trials(master: InProcessMaster, eid: int) -> list[dict[str, Any]]:
    return list(master.get(f"/api/v1/experiments/{eid}/trials")["trials"])


RANDOM = """
name: random-sim
entrypoint: python3 train.py
searcher: {name: random, metric: validation_loss, max_trials: 4, max_concurrent_trials: 2}
hyperparameters:
  lr: {type: double, minval: 0.01, maxval: 1.0}
reproducibility: {experiment_seed: 7}
"""

ASHA = """
name: asha-sim
entrypoint: python3 train.py
searcher:
  name: adaptive_asha
  metric: validation_loss
  max_trials: 8
  max_time: 8
  time_metric: batches
  divisor: 2
  max_rungs: 3
  mode: aggressive
hyperparameters:
  lr: {type: double, minval: 0.01, maxval: 1.0}
reproducibility: {experiment_seed: 3}
"""


def test_random_search_completes_with_metrics_and_checkpoints(loop_master: InProcessMaster) -> None:
    agents = [
        SimAgent(loop_master.url, loop_master.agent_token, f"sim-{i}").start() for i in range(2)
    ]
    try:
        eid = create(loop_master, RANDOM)
        wait(lambda: exp_state(loop_master, eid) == "STATE_COMPLETED", 90, "experiment to complete")
        ts = trials(loop_master, eid)
        assert len(ts) == 4
        assert {t["state"] for t in ts} == {"STATE_COMPLETED"}
        for t in ts:
            assert t["totalBatchesProcessed"] == 8
            assert "validation_loss" in t["summaryMetrics"]["validation_metrics"]
            ckpts = loop_master.get(f"/api/v1/trials/{t['id']}/checkpoints")["checkpoints"]
            assert [c["metadata"]["steps_completed"] for c in ckpts] == [2, 4, 6, 8]
        # Each trial ran once (no restart); the GC task that follows the end is not counted.
        assert sum(len(a.trials_started) for a in agents) == 4
    finally:
        for a in agents:
            a.stop()


def test_asha_stops_trials_gracefully_and_they_complete(loop_master: InProcessMaster) -> None:
    agents = [
        SimAgent(loop_master.url, loop_master.agent_token, f"sim-{i}", slots=2).start()
        for i in range(2)
    ]
    try:
        eid = create(loop_master, ASHA)
        wait(
            lambda: exp_state(loop_master, eid) == "STATE_COMPLETED", 120, "experiment to complete"
        )
        ts = trials(loop_master, eid)
        assert len(ts) == 8
        assert {t["state"] for t in ts} == {"STATE_COMPLETED"}
        stopped_early = [t for t in ts if t["totalBatchesProcessed"] < 8]
        assert stopped_early, "the searcher should stop some trials before max_time"
    finally:
        for a in agents:
            a.stop()


def test_pause_preempts_and_activate_resumes_from_checkpoint(loop_master: InProcessMaster) -> None:
    import threading

    gate = threading.Event()

    def slow(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        from tests.fakes.sim_agent import default_training

        env = spec["env"]
        if env["DET_TRIAL_RUN_ID"] == "1":
            # First run: train to step 4 then wait for the preemption signal.
            code = default_training(master, spec, killed, steps=4, validate_every=2)
            s = requests.Session()
            s.headers["Grpc-Metadata-x-allocation-token"] = f"Bearer {env['DET_SESSION_TOKEN']}"
            while not s.get(
                f"{master}/api/v1/allocations/{env['DET_ALLOCATION_ID']}/signals/preemption",
                params={"timeout_seconds": 5},
                timeout=10,
            ).json()["preempt"]:
                pass
            gate.set()
            return code
        return default_training(master, spec, killed, steps=8, validate_every=2)

    agent = SimAgent(loop_master.url, loop_master.agent_token, "sim-0", train=slow).start()
    try:
        eid = create(loop_master, RANDOM.replace("max_trials: 4", "max_trials: 1"))
        wait(
            lambda: (trials(loop_master, eid) or [{}])[0].get("totalBatchesProcessed") == 4,
            60,
            "4 steps",
        )
        loop_master.post(f"/api/v1/experiments/{eid}/pause")
        wait(gate.is_set, 30, "preemption delivered")
        wait(lambda: trials(loop_master, eid)[0]["state"] == "STATE_PAUSED", 30, "trial paused")
        loop_master.post(f"/api/v1/experiments/{eid}/activate")
        wait(lambda: exp_state(loop_master, eid) == "STATE_COMPLETED", 60, "experiment to complete")
        t = trials(loop_master, eid)[0]
        assert t["restarts"] == 0
        steps = [
            m["totalBatches"]
            for m in loop_master.get(
                f"/api/v1/trials/{t['id']}/metrics", params={"group": "training"}
            )["metrics"]
        ]
        assert steps == [1, 2, 3, 4, 5, 6, 7, 8], "the second run resumes at step 5"
    finally:
        agent.stop()


def test_crashing_trial_restarts_up_to_max_restarts_then_errors(
    loop_master: InProcessMaster,
) -> None:
    def crash(master: str, spec: dict[str, Any], killed: Any) -> int:
        return 3

    agent = SimAgent(loop_master.url, loop_master.agent_token, "sim-0", train=crash).start()
    try:
        eid = create(
            loop_master, RANDOM.replace("max_trials: 4", "max_trials: 1") + "max_restarts: 2\n"
        )
        wait(
            lambda: exp_state(loop_master, eid) in ("STATE_ERROR", "STATE_COMPLETED"),
            60,
            "experiment to end",
        )
        t = trials(loop_master, eid)[0]
        assert t["state"] == "STATE_ERROR"
        assert t["restarts"] == 3
        assert len(agent.trials_started) == 3
        assert exp_state(loop_master, eid) == "STATE_ERROR"
    finally:
        agent.stop()


def test_lost_agent_requeues_without_counting_a_restart(loop_master: InProcessMaster) -> None:
    import threading

    hang = threading.Event()

    def first_hangs(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        from tests.fakes.sim_agent import default_training

        if spec["env"]["DET_TRIAL_RUN_ID"] == "1":
            default_training(master, spec, killed, steps=2)
            hang.set()
            killed.wait(60)
            return 137
        return default_training(master, spec, killed)

    a0 = SimAgent(loop_master.url, loop_master.agent_token, "sim-0", train=first_hangs).start()
    try:
        eid = create(loop_master, RANDOM.replace("max_trials: 4", "max_trials: 1"))
        wait(hang.is_set, 60, "first run to reach step 2")
        a0.stop()  # the machine vanishes
        a1 = SimAgent(loop_master.url, loop_master.agent_token, "sim-1", train=first_hangs).start()
        try:
            wait(
                lambda: exp_state(loop_master, eid) == "STATE_COMPLETED",
                90,
                "experiment to complete",
            )
            t = trials(loop_master, eid)[0]
            assert t["restarts"] == 0
            assert t["totalBatchesProcessed"] == 8
        finally:
            a1.stop()
    finally:
        a0.stop()


def test_kill_ends_running_trial_canceled(loop_master: InProcessMaster) -> None:
    def forever(master: str, spec: dict[str, Any], killed: Any) -> int:
        killed.wait(120)
        return 137

    agent = SimAgent(loop_master.url, loop_master.agent_token, "sim-0", train=forever).start()
    try:
        eid = create(loop_master, RANDOM.replace("max_trials: 4", "max_trials: 1"))
        wait(lambda: agent.started, 30, "trial to start")
        loop_master.post(f"/api/v1/experiments/{eid}/kill")
        wait(lambda: exp_state(loop_master, eid) == "STATE_CANCELED", 30, "experiment canceled")
        assert trials(loop_master, eid)[0]["state"] == "STATE_CANCELED"
    finally:
        agent.stop()


def test_name_filter_takes_percent_and_underscore_literally(loop_master: InProcessMaster) -> None:
    config = "name: {}\nentrypoint: x\nsearcher: {{name: single, metric: loss, max_length: 1}}\n"
    ids = {n: create(loop_master, config.format(n), activate=False) for n in ("a%b", "a_c", "abc")}

    def named(fragment: str) -> set[int]:
        found = loop_master.get("/api/v1/experiments", params={"name": fragment})["experiments"]
        return {int(e["id"]) for e in found}

    assert named("%") == {ids["a%b"]}
    assert named("_") == {ids["a_c"]}
    assert named("a") == set(ids.values())
