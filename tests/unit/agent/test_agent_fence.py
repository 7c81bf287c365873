"""Fencing: an agent the master has not answered for a little less than the master's agent
timeout stops its task containers (issue 39, a machine cut off the network), since the master
then ends their allocations and runs the work again elsewhere. Shorter silences change nothing.

The decision (``det.agent.reconcile.fence_after``, ``fence``) is table-tested; the daemon's use
of it runs the real ``Agent`` against the fake master (tests/fakes/master.py) with a clock the
test moves and a fake of the agent's own container runtime.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from det.agent.config import load_config
from det.agent.containers import container_env
from det.agent.daemon import Agent
from det.agent.reconcile import (
    FENCE_GRACE_SECONDS,
    FENCED_ERROR,
    Actual,
    fence,
    fence_after,
)
from det.common.agent_protocol import AGENT_LOST
from det.common.states import AllocationState
from det.exec import allocation_watch
from det.master.services import containers
from tests.fakes.agent_runtime import FakeRuntime
from tests.fakes.master import FakeMaster

RUNNING = AllocationState.RUNNING


@pytest.mark.parametrize(
    ("master_timeout", "configured", "after"),
    [
        (30.0, None, 15.0),  # the grace and the margin (a request's timeout) end in time
        (20.0, None, 10.0),
        (300.0, None, 285.0),
        (8.0, None, 4.0),  # never before half of it: a short timeout must not stop a blink
        (None, None, None),  # a master that announces none (older): never
        (0.0, None, None),
        (30.0, 12.0, 12.0),  # agent.yaml's fence_seconds wins
        (30.0, 0.0, None),  # ... and 0 turns fencing off
        (None, 12.0, 12.0),
    ],
)
def test_the_fence_comes_before_the_masters_deadline(
    master_timeout: float | None, configured: float | None, after: float | None
) -> None:
    assert fence_after(master_timeout, configured) == after


def test_a_fence_stops_every_container_not_yet_ended_or_stopping() -> None:
    actual = [
        Actual("run", RUNNING),
        Actual("pulling", AllocationState.PULLING),
        Actual("done", AllocationState.TERMINATED, exit_code=0),
        Actual("stopping", RUNNING, killing=True),
    ]
    assert fence(actual, 9.9, 10.0) == ()
    assert fence(actual, 10.0, 10.0) == ("run", "pulling")
    assert fence(actual, 1e6, None) == ()


def test_a_fenced_container_ends_for_the_masters_own_reason_for_a_lost_agent() -> None:
    # The master re-queues the work without counting a restart for either (trial_runs, ntsc).
    assert FENCED_ERROR == AGENT_LOST == containers.AGENT_LOST


@pytest.fixture
def master() -> Iterator[FakeMaster]:
    m = FakeMaster(token="tok", heartbeat_seconds=1.0).start()
    m.run("a1", "7.1.1", {"taskId": "7.1"})
    yield m
    m.down = False
    m.stop()


def agent_for(master: FakeMaster, tmp: Path, *flags: str) -> tuple[Agent, FakeRuntime, list[float]]:
    argv = ["--master-url", master.url, "--agent-id", "a1", "--agent-token", "tok"]
    argv += ["--state-dir", str(tmp), "--slot-type", "none", "--no-wait-for-work", *flags]
    agent = Agent(load_config(argv, environ={}), docker_client=object(), slots=[])
    runtime = FakeRuntime()
    agent.runtime = runtime  # type: ignore[assignment]
    now = [1000.0]
    agent._clock = lambda: now[0]
    return agent, runtime, now


def test_an_agent_cut_off_stops_its_containers_before_the_master_gives_them_up(
    master: FakeMaster, tmp_path: Path
) -> None:
    master.agent_timeout_seconds = 20.0
    agent, runtime, now = agent_for(master, tmp_path)
    agent.tick()  # answered: the master's timeout is known
    assert agent.fence_after() == 10.0
    master.down = True
    now[0] += 4.0
    delay = agent.tick()
    assert runtime.kills == []  # a blink: everything runs on
    assert 0 < delay <= 6.0  # the next look comes no later than the fence
    now[0] += 6.0
    agent.tick()
    assert runtime.kills == [("7.1.1", FENCE_GRACE_SECONDS, AGENT_LOST)]
    now[0] += 30.0
    agent.tick()
    assert len(runtime.kills) == 1  # stopped once
    # The link back: the report says why it ended (the master reads it as a lost agent).
    master.down = False
    runtime.records["7.1.1"] = Actual(
        "7.1.1", AllocationState.TERMINATED, "c1", exit_code=143, error=AGENT_LOST
    )
    agent.tick()
    report = master.report("a1", "7.1.1")
    assert report is not None and report["error"] == AGENT_LOST, report


def test_an_answer_restarts_the_agents_patience(master: FakeMaster, tmp_path: Path) -> None:
    master.agent_timeout_seconds = 20.0
    agent, runtime, now = agent_for(master, tmp_path)
    agent.tick()
    for _ in range(3):  # 9 s silent, answered, 9 s silent...: never 10 s in a row
        master.down = True
        now[0] += 9.0
        agent.tick()
        master.down = False
        agent.tick()
    assert runtime.kills == []


@pytest.mark.parametrize("flags", [(), ("--fence-seconds", "0")])
def test_no_fence_without_a_masters_timeout_or_with_fencing_off(
    master: FakeMaster, tmp_path: Path, flags: tuple[str, ...]
) -> None:
    master.agent_timeout_seconds = None if not flags else 20.0
    agent, runtime, now = agent_for(master, tmp_path, *flags)
    agent.tick()
    master.down = True
    now[0] += 3600.0
    agent.tick()
    assert runtime.kills == []


def test_an_agent_that_never_heard_the_master_stops_nothing(
    master: FakeMaster, tmp_path: Path
) -> None:
    agent, runtime, now = agent_for(master, tmp_path, "--fence-seconds", "5")
    master.down = True
    now[0] += 3600.0
    agent.tick()
    assert runtime.kills == []


def test_the_agent_tells_its_containers_its_fence(master: FakeMaster, tmp_path: Path) -> None:
    """A gang's container stops itself after as long without the master (det.exec.allocation_
    watch): the case of a machine cut off whose agent is dead too."""
    master.agent_timeout_seconds = 20.0
    agent, _, _ = agent_for(master, tmp_path)
    agent.tick()
    assert agent.runtime.fence_seconds == 10.0
    spec: Any = {"taskId": "7.1", "env": {"DET_MASTER": "http://m"}}
    env = container_env(spec, "a1", "c1", "7.1.1", fence_seconds=agent.runtime.fence_seconds)
    assert env[allocation_watch.FENCE_ENV] == "10"
    assert allocation_watch.fence_seconds(env) == 10.0
    assert allocation_watch.FENCE_ENV not in container_env(spec, "a1", "c1", "7.1.1")
