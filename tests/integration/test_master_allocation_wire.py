"""The allocation routes as Determined's client calls them: ``timeoutSeconds`` (the JSON name
its bindings send) is honoured by the preemption long-poll, and ``POST
.../signals/pending_preemption`` (a task reporting that its host will preempt it) asks the
allocation to checkpoint and exit."""

from __future__ import annotations

import time

import pytest
import requests

from tests.fakes.sim_agent import Holder, SimAgent, wait
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration

CONFIG = """
name: wire
entrypoint: x
searcher: {name: single, metric: loss, max_length: 1}
hyperparameters: {}
"""


def test_preemption_poll_takes_timeout_seconds_and_pending_preemption_preempts(
    loop_master: InProcessMaster,
) -> None:
    m = loop_master
    hold = Holder()  # its tasks run until the test ends, however long that takes
    specs, release = hold.specs, hold.release

    agent = SimAgent(m.url, m.agent_token, "sim-0", slots=1, train=hold).start()
    try:
        m.post("/api/v1/experiments", {"config": CONFIG, "activate": True})
        wait(lambda: len(specs) == 1, 60, "a task")
        env = specs[0]["env"]
        url = f"{m.url}/api/v1/allocations/{env['DET_ALLOCATION_ID']}/signals"
        task = {"Grpc-Metadata-x-allocation-token": f"Bearer {env['DET_SESSION_TOKEN']}"}

        started = time.monotonic()
        r = requests.get(
            f"{url}/preemption", params={"timeoutSeconds": 2}, headers=task, timeout=30
        )
        assert r.status_code == 200, r.text
        assert r.json() == {"preempt": False}
        assert time.monotonic() - started >= 1.5, "timeoutSeconds was ignored (no wait)"

        bad = requests.get(
            f"{url}/preemption", params={"timeoutSeconds": "soon"}, headers=task, timeout=30
        )
        assert bad.status_code == 400 and "timeoutSeconds" in bad.json()["message"]

        r = requests.post(
            f"{url}/pending_preemption",
            json={"allocationId": env["DET_ALLOCATION_ID"]},
            headers=task,
            timeout=30,
        )
        assert r.status_code == 200, r.text
        r = requests.get(
            f"{url}/preemption", params={"timeoutSeconds": 0}, headers=task, timeout=30
        )
        assert r.json() == {"preempt": True}
    finally:
        release.set()
        agent.stop()
