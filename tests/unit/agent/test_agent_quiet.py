"""Quiet heartbeats (issue 43): an agent that holds the master's ``changes`` long-poll sends a
heartbeat only when what it reports changed, when the long-poll announces work, or when the
master's ``keepaliveSeconds`` since its last answer are nearly up; every pass still looks at
its containers and acts on the last answer. Without the long-poll, or with a master that
announces no keepalive, every pass sends, as before.

The real ``Agent`` against the fake master (tests/fakes/master.py), with a clock the test moves
and a fake of the agent's container runtime.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from det.agent.config import load_config
from det.agent.daemon import Agent
from det.agent.reconcile import Actual
from det.common.states import AllocationState
from det.master.services.agents import keepalive_seconds
from tests.fakes.agent_runtime import FakeRuntime
from tests.fakes.master import FakeMaster


@pytest.fixture
def master() -> Iterator[FakeMaster]:
    m = FakeMaster(token="tok", heartbeat_seconds=1.0).start()
    m.run("a1", "7.1.1", {"taskId": "7.1"})
    m.agent_timeout_seconds = 30.0
    m.keepalive_seconds = 5.0
    yield m
    m.stop()


def agent_for(master: FakeMaster, tmp: Path) -> tuple[Agent, FakeRuntime, list[float]]:
    argv = ["--master-url", master.url, "--agent-id", "a1", "--agent-token", "tok"]
    argv += ["--state-dir", str(tmp), "--slot-type", "none"]
    agent = Agent(load_config(argv, environ={}), docker_client=object(), slots=[])
    runtime = FakeRuntime()
    agent.runtime = runtime  # type: ignore[assignment]
    now = [1000.0]
    agent._clock = lambda: now[0]
    return agent, runtime, now


def sent(master: FakeMaster) -> int:
    return len(master.heartbeats.get("a1", []))


def passes(agent: Agent, now: list[float], n: int) -> None:
    for _ in range(n):
        now[0] += 1.0
        agent.tick()


def test_a_quiet_agent_sends_once_per_keepalive(master: FakeMaster, tmp_path: Path) -> None:
    agent, _, now = agent_for(master, tmp_path)
    agent._watching = True  # its long-poll is held
    agent.tick()
    assert sent(master) == 1
    passes(agent, now, 3)  # 1, 2, 3 s after the answer: nothing changed
    assert sent(master) == 1
    passes(agent, now, 1)  # 4 s: a pass before the keepalive is up
    assert sent(master) == 2
    passes(agent, now, 8)  # 16 passes in all: one heartbeat per 4 passes
    assert sent(master) == 4


def test_at_the_default_timeout_a_quiet_agent_is_heard_four_times_within_it(
    master: FakeMaster, tmp_path: Path
) -> None:
    """The keepalive the master announces at its default agent timeout (30 s) leaves the
    master four heartbeats of a quiet agent within any 30 s, none more than a quarter of the
    timeout after the last."""
    timeout = 30.0
    master.agent_timeout_seconds = timeout
    master.keepalive_seconds = keepalive_seconds(timeout)
    agent, _, now = agent_for(master, tmp_path)
    agent._watching = True
    agent.tick()
    at = [now[0]]
    for _ in range(60):
        before = sent(master)
        passes(agent, now, 1)
        if sent(master) > before:
            at.append(now[0])
    gaps = [b - a for a, b in itertools.pairwise(at)]
    assert gaps and max(gaps) <= timeout / 4
    assert min(sum(1 for t in at if s < t <= s + timeout) for s in at if s + timeout <= now[0]) >= 4


def test_a_change_or_announced_work_is_sent_at_the_next_pass(
    master: FakeMaster, tmp_path: Path
) -> None:
    agent, runtime, now = agent_for(master, tmp_path)
    agent._watching = True
    agent.tick()
    passes(agent, now, 1)
    assert sent(master) == 1
    # The container exits: reported at the next pass.
    runtime.records["7.1.1"] = Actual("7.1.1", AllocationState.TERMINATED, "c1", exit_code=0)
    passes(agent, now, 1)
    assert sent(master) == 2
    assert master.report("a1", "7.1.1")["state"] == "TERMINATED"  # type: ignore[index]
    passes(agent, now, 1)
    assert sent(master) == 2
    # The long-poll says the master has work for it: sent for at once.
    master.run("a1", "7.2.1", {"taskId": "7.2"})
    agent._must_send.set()
    passes(agent, now, 1)
    assert sent(master) == 3
    assert "7.2.1" in runtime.records  # started from that answer


def test_a_quiet_pass_acts_on_the_last_answer(master: FakeMaster, tmp_path: Path) -> None:
    """The master recorded the allocation's end (it lists it no more); its container's last
    log lines were still on their way (not removable): once they are shipped, a pass that
    sends nothing removes it."""
    agent, runtime, now = agent_for(master, tmp_path)
    agent._watching = True
    master._set("a1", "7.1.1", None)
    runtime.records["7.1.1"] = Actual(
        "7.1.1", AllocationState.TERMINATED, "c1", exit_code=0, logs_done=False
    )
    agent.tick()
    count = sent(master)
    assert runtime.removed == []
    runtime.records["7.1.1"] = Actual("7.1.1", AllocationState.TERMINATED, "c1", exit_code=0)
    passes(agent, now, 1)
    assert sent(master) == count  # the report did not change: nothing sent
    assert runtime.removed == ["7.1.1"]


@pytest.mark.parametrize("case", ["no long-poll", "no keepalive announced"])
def test_every_pass_sends_without_the_long_poll_or_a_keepalive(
    master: FakeMaster, tmp_path: Path, case: str
) -> None:
    agent, _, now = agent_for(master, tmp_path)
    if case == "no keepalive announced":
        master.keepalive_seconds = None
        agent._watching = True
    agent.tick()
    passes(agent, now, 5)
    assert sent(master) == 6


@pytest.mark.parametrize(
    ("timeout", "keepalive"),
    [(30.0, 7.5), (60.0, 10.0), (12.0, 3.0), (3.0, 1.0), (0.5, 1.0)],
)
def test_the_masters_keepalive_leaves_four_chances_within_its_timeout(
    timeout: float, keepalive: float
) -> None:
    assert keepalive_seconds(timeout) == keepalive


def test_the_answers_logs_watched_reach_the_shipper(master: FakeMaster, tmp_path: Path) -> None:
    """The allocations the last answer marks ``logsWatched`` are the ones whose lines the
    shipper posts at once (det.agent.logs); the next answer without the mark ends it."""
    agent, _, now = agent_for(master, tmp_path)
    agent.tick()
    assert agent.shipper._watched == frozenset()
    with master.lock:
        master.desired["a1"] = [{**master.desired["a1"][0], "logsWatched": True}]
    passes(agent, now, 1)
    assert agent.shipper._watched == frozenset({"7.1.1"})
    master.run("a1", "7.1.1", {"taskId": "7.1"})  # no longer watched
    passes(agent, now, 1)
    assert agent.shipper._watched == frozenset()
