"""An agent hears of new work from PostgreSQL through the master (migration 0033, the
``changes`` long-poll), not only at its next heartbeat. The master's app and control loop run in
the test's process (``loop_master``); the agents' requests reach the app from their threads."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from det.agent.config import load_config
from det.agent.daemon import Agent
from det.agent.master_client import MasterClient
from tests.fakes.master import FakeMaster
from tests.fakes.sim_agent import SimAgent, wait
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration

CONFIG = """
name: wake
entrypoint: x
searcher: {name: single, metric: loss, max_length: 1}
"""


def test_a_placement_wakes_the_agents_wait_and_only_its(loop_master: InProcessMaster) -> None:
    m = loop_master
    release = threading.Event()

    def hold(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        release.wait(60)
        return 0

    agent = SimAgent(m.url, m.agent_token, "sim-w", slots=1, train=hold).start()
    client = MasterClient(m.url, m.agent_token, timeout=30)
    try:
        wait(
            lambda: any(a["id"] == "sim-w" for a in m.get("/api/v1/agents")["agents"]), 60, "sim-w"
        )
        answers: dict[str, bool] = {}

        def ask(agent_id: str, seconds: float) -> None:
            answers[agent_id] = client.wait_for_work(agent_id, seconds)

        mine = threading.Thread(target=ask, args=("sim-w", 30))
        other = threading.Thread(target=ask, args=("sim-other", 3))
        mine.start()
        other.start()
        time.sleep(1.0)  # no work yet: the wait goes on (a poll would answer at once)
        assert mine.is_alive()
        m.post("/api/v1/experiments", {"config": CONFIG, "activate": True})
        mine.join(60)
        other.join(60)
        # True only comes from the notification (a timeout answers false).
        assert answers == {"sim-w": True, "sim-other": False}
    finally:
        release.set()
        agent.stop()


@pytest.mark.parametrize("bad", ["nan", "inf", "-1", "x"])
def test_a_bad_wait_is_refused_in_one_line(loop_master: InProcessMaster, bad: str) -> None:
    m = loop_master
    r = requests.get(
        f"{m.url}/api/v1/agents/a-1/changes",
        params={"timeoutSeconds": bad},
        headers={"Authorization": f"Bearer {m.agent_token}"},
        timeout=30,
    )
    assert r.status_code == 400, r.text
    assert "timeoutSeconds" in r.json()["message"]


def agent_of(url: str, token: str, tmp: Path) -> Agent:
    argv = [
        "--master-url", url, "--agent-id", f"wake-{os.getpid()}-{time.monotonic_ns()}",
        "--agent-token", token, "--slot-type", "cpu", "--artificial-slots", "1",
        "--state-dir", str(tmp / "agent"), "--heartbeat-seconds", "60",
    ]  # fmt: skip
    return Agent(load_config(argv, {}))


def test_the_agent_is_woken_when_work_is_placed_on_it(
    loop_master: InProcessMaster, tmp_path: Path
) -> None:
    m = loop_master
    agent = agent_of(m.url, m.agent_token, tmp_path)
    agent.tick()  # registers; nothing to run yet
    stop = threading.Event()
    watcher = threading.Thread(target=agent.watch_for_work, args=(stop,), daemon=True)
    watcher.start()
    try:
        time.sleep(1.0)  # the wait is under way
        agent._wake.clear()
        m.post("/api/v1/experiments", {"config": CONFIG, "activate": True})
        # Nothing else wakes this agent: it runs no loop and no container changed.
        wait(lambda: agent._wake.is_set(), 60, "the agent to be woken")
    finally:
        stop.set()


def test_an_agent_of_a_master_without_the_wait_keeps_to_its_heartbeat(tmp_path: Path) -> None:
    fake = FakeMaster().start()
    try:
        agent = agent_of(fake.url, fake.token, tmp_path)
        agent.registered.set()
        stop = threading.Event()
        watcher = threading.Thread(target=agent.watch_for_work, args=(stop,), daemon=True)
        watcher.start()
        watcher.join(30)
        assert not watcher.is_alive()  # the 404 ended it
        assert not agent._wake.is_set()
        stop.set()
    finally:
        fake.stop()
