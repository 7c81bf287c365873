"""Building a container spec reads the task container policy (cached a few seconds per process)
without a second connection from the master's pool: with every pooled connection held by a
heartbeat that builds specs, none waits for another (det.master.services.task_container_policy;
bench/scale.py found 100 agents x 200 trials lost every agent on a pool of 20). On the master's
app and control loop in the test's process (``loop_master_factory``): the heartbeats call it from
their own threads, and a pool of 2 connections is shared by them and the loop."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import requests

from det.master.services.task_container_policy import CACHE_SECONDS
from tests.fakes.sim_agent import Holder, SimAgent, wait
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration

CONFIG = """
name: specs
entrypoint: x
searcher: {name: random, metric: loss, max_trials: 2, max_concurrent_trials: 2}
hyperparameters: {lr: {type: double, minval: 0.1, maxval: 1}}
"""

CALLERS = 8
ROUNDS = 3  # of the policy's cache expiring (CACHE_SECONDS each) while heartbeats build specs


def test_heartbeats_that_build_specs_on_a_full_pool_are_all_answered(
    loop_master_factory: Any,
) -> None:
    m: InProcessMaster = loop_master_factory(extra={"db_pool_size": 2})
    hold = Holder()
    agent = SimAgent(m.url, m.agent_token, "sim-0", slots=2, train=hold, interval=0.5).start()
    try:
        m.post("/api/v1/experiments", {"config": CONFIG, "activate": True})
        wait(lambda: len(hold.specs) == 2, 60, "two tasks")
        answers: list[int | str] = []
        end = time.monotonic() + ROUNDS * CACHE_SECONDS

        def beat() -> None:
            s = requests.Session()
            s.headers["Authorization"] = f"Bearer {m.agent_token}"
            while time.monotonic() < end:
                try:
                    # The agent's own report: both trials running, so each answer builds both
                    # containers' specs.
                    r = s.post(
                        f"{m.url}/api/v1/agents/sim-0/heartbeat", json=agent._report(), timeout=10
                    )
                    answers.append(r.status_code)
                except requests.RequestException as e:
                    answers.append(type(e).__name__)

        callers = [threading.Thread(target=beat) for _ in range(CALLERS)]
        for t in callers:
            t.start()
        for t in callers:
            t.join(60)
        assert answers and set(answers) == {200}, {a: answers.count(a) for a in set(answers)}
    finally:
        hold.release.set()
        agent.stop()
