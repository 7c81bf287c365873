"""An experiment's progress counts its unfinished trials' training (issue 38): a trial that
reported 12,800 of 200,000 batches makes its paused experiment 6.4% done, not 0%."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import requests

from tests.fakes.sim_agent import SimAgent, wait
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration

CONFIG = """
name: progress
entrypoint: x
searcher: {name: random, metric: loss, max_trials: 2, max_concurrent_trials: 1}
hyperparameters: {lr: 0.1}
"""


def test_paused_experiment_shows_its_trials_training(loop_master: InProcessMaster) -> None:
    m = loop_master
    specs: list[dict[str, Any]] = []
    release = threading.Event()

    def hold(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        specs.append(spec)
        while not release.is_set() and not killed.is_set():
            release.wait(0.2)
        return 0

    agent = SimAgent(m.url, m.agent_token, "sim-progress", slots=1, train=hold).start()
    try:
        eid = int(
            m.post("/api/v1/experiments", {"config": CONFIG, "activate": True})["experiment"]["id"]
        )
        wait(lambda: specs, 60, "the first trial running")
        env = specs[0]["env"]
        task = requests.Session()
        task.headers["Grpc-Metadata-x-allocation-token"] = f"Bearer {env['DET_SESSION_TOKEN']}"
        r = task.post(
            f"{m.url}/api/v1/trials/{env['DET_TRIAL_ID']}/progress",
            json={"progress": 12_800 / 200_000, "is_raw": True},
            timeout=10,
        )
        assert r.status_code == 200, r.text
        # One of two trials, 6.4% trained.
        progress = m.get(f"/api/v1/experiments/{eid}")["experiment"]["progress"]
        assert progress == pytest.approx(0.032)

        m.post(f"/api/v1/experiments/{eid}/pause")
        wait(
            lambda: m.get(f"/api/v1/experiments/{eid}")["experiment"]["state"] == "STATE_PAUSED",
            60,
            "the experiment paused",
        )
        assert m.get(f"/api/v1/experiments/{eid}")["experiment"]["progress"] == pytest.approx(0.032)
    finally:
        release.set()
        agent.stop()
