"""Killing the leading master loses nothing: reports survive, no trial is created twice, the
search continues (on the restarted master, or on a second master that takes over)."""

from __future__ import annotations

import signal
import time
from collections import Counter
from typing import Any

import psycopg
import pytest

from tests.fakes import sim_agent
from tests.fakes.sim_agent import SimAgent, wait
from tests.integration.conftest import Master, free_port
from tests.integration.test_master_lifecycle import create, exp_state, trials

pytestmark = pytest.mark.integration

SEARCH = """
name: restart-random
entrypoint: python3 train.py
searcher: {name: random, metric: validation_loss, max_trials: 6, max_concurrent_trials: 3}
hyperparameters:
  lr: {type: double, minval: 0.01, maxval: 1.0}
reproducibility: {experiment_seed: 11}
"""


def slow_training(master: str, spec: dict[str, Any], killed: Any) -> int:
    def curve(h: dict[str, Any], t: int) -> float:
        time.sleep(0.15)  # long enough that the kill lands mid-search
        return float(h["lr"]) / t

    return sim_agent.default_training(master, spec, killed, steps=10, validate_every=2, curve=curve)


def check_nothing_lost(pg_url: str, eid: int) -> None:
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT m.trial_id, m.metric_group, m.total_batches FROM metrics m JOIN trials t ON t.id = m.trial_id"
            " WHERE t.experiment_id = %s",
            (eid,),
        ).fetchall()
        ckpts = {
            str(r[0])
            for r in conn.execute(
                "SELECT c.uuid FROM checkpoints c JOIN trials t ON t.id = c.trial_id WHERE t.experiment_id = %s",
                (eid,),
            )
        }
        request_ids = [
            r[0]
            for r in conn.execute("SELECT request_id FROM trials WHERE experiment_id = %s", (eid,))
        ]
    stored = {(r[0], r[1], r[2]) for r in rows}
    acked_metrics = set()
    acked_ckpts = set()
    for url, body in sim_agent.ACKED:
        if url.endswith("/metrics") and body:
            m = body["metrics"]
            acked_metrics.add((m["trialId"], body["group"], m["stepsCompleted"]))
        elif url.endswith("/api/v1/checkpoints") and body:
            acked_ckpts.add(body["uuid"])
    assert acked_metrics, "the simulated tasks reported nothing"
    assert acked_metrics <= stored, f"lost metric reports: {sorted(acked_metrics - stored)[:5]}"
    assert acked_ckpts <= ckpts, f"lost checkpoints: {sorted(acked_ckpts - ckpts)[:5]}"
    assert len(request_ids) == 6
    assert not [r for r, n in Counter(request_ids).items() if n > 1], "a trial was created twice"


def test_leader_killed_and_restarted_loses_nothing(master_factory: Any, pg_url: str) -> None:
    sim_agent.ACKED.clear()
    port = free_port()
    m: Master = master_factory(port=port, name="a")
    agents = [
        SimAgent(m.url, m.agent_token, f"sim-{i}", train=slow_training).start() for i in range(3)
    ]
    try:
        eid = create(m, SEARCH)
        wait(
            lambda: (
                len(trials(m, eid)) >= 3
                and any(t["totalBatchesProcessed"] >= 2 for t in trials(m, eid))
            ),
            300,
            "training under way",
        )
        m.kill(signal.SIGKILL)
        time.sleep(1.0)
        m2: Master = master_factory(port=port, name="a-restarted")
        wait(
            lambda: exp_state(m2, eid) == "STATE_COMPLETED",
            600,
            "search to complete after the restart",
        )
        ts = trials(m2, eid)
        assert len(ts) == 6 and {t["state"] for t in ts} == {"STATE_COMPLETED"}
        assert all(t["totalBatchesProcessed"] == 10 for t in ts)
        check_nothing_lost(pg_url, eid)
    finally:
        for a in agents:
            a.stop()


def test_second_master_takes_over_the_loops(master_factory: Any, pg_url: str) -> None:
    sim_agent.ACKED.clear()
    leader: Master = master_factory(name="leader")
    follower: Master = master_factory(name="follower")
    # Agents and tasks talk to the follower (as through a load balancer); the leader runs the loops.
    agents = [
        SimAgent(follower.url, follower.agent_token, f"sim-{i}", train=slow_training).start()
        for i in range(3)
    ]
    try:
        eid = create(follower, SEARCH)
        wait(
            lambda: any(t["totalBatchesProcessed"] >= 2 for t in trials(follower, eid)),
            300,
            "training under way",
        )
        assert "leads the control loops" in leader.logs()
        assert "leads the control loops" not in follower.logs()
        leader.kill(signal.SIGKILL)
        wait(
            lambda: exp_state(follower, eid) == "STATE_COMPLETED",
            600,
            "search to complete on the follower",
        )
        assert "leads the control loops" in follower.logs()
        check_nothing_lost(pg_url, eid)
    finally:
        for a in agents:
            a.stop()
