"""Fencing on a real Docker engine: a real ``det-agent`` process whose master (the fake of
tests/fakes/master.py) stops answering stops its task containers a little before the master's
announced agent timeout, gracefully and once, and reports why when the master is back; with
``--fence-seconds 0`` they run on (docs/internals.md, "A trial across machines"). Where det's
master answers (its announced timeout, a fence reported to it), it is the app in the test's
process with its control loop (``loop_master``): no master process is needed."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from det.agent.master_client import MasterClient
from det.common.agent_protocol import AGENT_LOST
from tests.docker_support import docker_client as engine_with_image
from tests.fakes.master import FakeMaster
from tests.fakes.sim_agent import SimAgent, wait
from tests.integration.inproc import InProcessMaster
from tests.integration.test_agent_docker import (
    IMAGE,
    TOKEN,
    AgentProcess,
    own_containers,
    spec,
    wait_state,
)

pytestmark = [pytest.mark.integration, pytest.mark.docker]

#: The master's agent timeout here: the agent fences after max(4/2, 4 - 10) = 2 s of silence.
TIMEOUT = 4.0
TRAP = "trap 'echo got SIGTERM; exit 42' TERM; echo ready; while true; do sleep 0.1; done"


@pytest.fixture(scope="module")
def docker_client() -> Any:
    return engine_with_image(IMAGE)


@pytest.fixture
def master() -> Iterator[FakeMaster]:
    m = FakeMaster(token=TOKEN, heartbeat_seconds=0.2)
    m.agent_timeout_seconds = TIMEOUT
    m.start()
    yield m
    m.down = False
    m.stop()


@pytest.fixture
def agent(
    master: FakeMaster, tmp_path: Path, docker_client: Any
) -> Iterator[Callable[..., AgentProcess]]:
    agent_id = f"test-fence-{uuid.uuid4().hex[:8]}"
    started: list[AgentProcess] = []

    def make(*flags: str) -> AgentProcess:
        a = AgentProcess(master, agent_id, tmp_path, {"DET_MAX_BACKOFF_SECONDS": "1"})
        a.cmd += list(flags)
        started.append(a.start())
        return a

    yield make
    for a in started:
        if a.proc is not None and a.proc.poll() is None:
            a.kill(15)
    for c in own_containers(docker_client, agent_id):
        c.remove(force=True)


def running(docker_client: Any, agent_id: str) -> list[Any]:
    return [c for c in own_containers(docker_client, agent_id) if c.status == "running"]


def test_an_agent_the_master_stops_answering_stops_its_containers_before_its_timeout(
    master: FakeMaster, agent: Callable[..., AgentProcess], docker_client: Any
) -> None:
    a = agent()
    master.run(a.agent_id, "8.1.1", spec(TRAP, task="8.1", killGraceSeconds=30))
    wait_state(master, a.agent_id, "8.1.1", "RUNNING")
    master.wait_for(lambda: "ready\n" in master.log_lines("8.1.1"), desc="ready")
    master.down = True
    cut = time.monotonic()
    master.wait_for(
        lambda: not running(docker_client, a.agent_id), 30, "the fenced container to stop"
    )
    stopped = time.monotonic() - cut
    # Not at the first failed heartbeat (a blink), and gracefully: SIGTERM, not the spec's 30 s
    # grace and a SIGKILL.
    assert stopped >= TIMEOUT / 2 - 0.5, stopped
    (container,) = own_containers(docker_client, a.agent_id)
    assert container.attrs["State"]["ExitCode"] == 42, container.attrs["State"]
    assert "fencing: no answer from the master" in a.output(), a.tail()
    master.down = False
    report = wait_state(master, a.agent_id, "8.1.1", "TERMINATED")
    assert report["exitCode"] == 42 and report["error"] == AGENT_LOST, report
    assert "got SIGTERM\n" in master.wait_for(lambda: master.log_lines("8.1.1"))
    assert a.output().count("fencing: no answer") == 1, a.tail()


def test_with_fencing_off_the_containers_run_on_without_the_master(
    master: FakeMaster, agent: Callable[..., AgentProcess], docker_client: Any
) -> None:
    a = agent("--fence-seconds", "0")
    master.run(a.agent_id, "9.1.1", spec(TRAP, task="9.1"))
    wait_state(master, a.agent_id, "9.1.1", "RUNNING")
    master.down = True
    master.wait_for(lambda: "heartbeat failed" in a.output(), desc="the agent notices")
    time.sleep(TIMEOUT * 1.5)  # past the master's timeout: nothing stops
    assert running(docker_client, a.agent_id), own_containers(docker_client, a.agent_id)
    master.down = False
    assert wait_state(master, a.agent_id, "9.1.1", "RUNNING")["error"] is None


def test_the_master_announces_its_agent_timeout_in_every_answer(
    loop_master: InProcessMaster,
) -> None:
    client = MasterClient(loop_master.url, loop_master.agent_token)
    answer = client.heartbeat("fence-a1", {"slots": [], "resourcePool": "default"})
    # tests/integration/conftest.py's master: agent_timeout_seconds 10.
    assert answer.get("agentTimeoutSeconds") == 10, answer


GANG = """
name: fenced-gang
entrypoint: x
resources: {slots_per_trial: 2}
searcher: {name: single, metric: loss, max_length: 1}
max_restarts: 0
"""


def test_a_fence_reported_before_the_masters_verdict_requeues_without_a_restart(
    loop_master: InProcessMaster,
) -> None:
    """The link back before the master gave the agent up: the agent's first report says it
    stopped its container itself ('agent lost'). The master ends the gang's allocation once (the
    other agent's rank is killed) and queues the trial again, as for a lost agent: no restart
    counted, so a trial with max_restarts 0 runs again instead of failing."""
    m = loop_master
    runs: list[str] = []

    def train(master: str, spec: dict[str, Any], killed: Any) -> int:
        runs.append(str(spec["env"]["DET_ALLOCATION_ID"]))
        if len(set(runs)) > 1:
            return 0  # the next run: done at once
        killed.wait(60)
        return 143

    a = SimAgent(m.url, m.agent_token, "fence-a", slots=1, train=train).start()
    b = SimAgent(m.url, m.agent_token, "fence-b", slots=1, train=train).start()
    try:
        eid = int(
            m.post("/api/v1/experiments", {"config": GANG, "activate": True})["experiment"]["id"]
        )
        first = wait(lambda: next(iter(a.tasks), None), 60, "the gang's first run on fence-a")
        wait(lambda: first in b.tasks, 60, "the gang's first run on fence-b")
        task = a.tasks[first]
        task.error = AGENT_LOST  # what det.agent.reconcile.fence reports
        task.killed.set()
        wait(lambda: b.tasks.get(first) is None or b.tasks[first].killed.is_set(), 60, "b's kill")

        def state() -> str:
            return str(m.get(f"/api/v1/experiments/{eid}")["experiment"]["state"])

        wait(lambda: state() in ("STATE_COMPLETED", "STATE_ERROR"), 120, "the experiment's end")
        assert state() == "STATE_COMPLETED", m.get(f"/api/v1/experiments/{eid}")
        (trial,) = m.get(f"/api/v1/experiments/{eid}/trials")["trials"]
        assert int(trial["restarts"]) == 0, trial
        assert len(set(runs)) == 2, runs
    finally:
        a.stop()
        b.stop()
