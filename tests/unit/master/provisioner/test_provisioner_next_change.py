"""``next_change``: when the decider would decide otherwise with no new input (what a
serverless master schedules as a wake-up). Each row also checks that the decision really
changes just after that time and not just before it."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from det.master.provisioner.cost import CostPolicy
from det.master.provisioner.decider import (
    AgentInfo,
    Decision,
    LaunchRecord,
    PoolSnapshot,
    ScalePolicy,
    decide,
    next_change,
)
from det.master.provisioner.provider import Instance, InstanceState, LaunchOption, Market

NOW = dt.datetime(2026, 1, 31, 23, 0, tzinfo=dt.UTC)
MIN = dt.timedelta(minutes=1)
SEC = dt.timedelta(seconds=1)
OPT = LaunchOption("m5.large", market=Market.ON_DEMAND, slots=1)
OPT2 = LaunchOption("m5.xlarge", market=Market.ON_DEMAND, slots=1)
POLICY = ScalePolicy(
    options=(OPT,),
    max_instances=3,
    max_idle_agent_period=10 * MIN,
    max_agent_starting_period=8 * MIN,
    max_agent_disconnected_period=5 * MIN,
    launch_error_timeout=5 * MIN,
)


def inst(id: str, age: dt.timedelta) -> Instance:
    return Instance(
        id=id, state=InstanceState.RUNNING, launched_at=NOW - age, instance_type="m5.large"
    )


def moves(decision: Decision) -> tuple[object, ...]:
    return (decision.launches, decision.terminations)


CASES = {
    "launch error backoff ends with work queued": (
        PoolSnapshot("p", demand=(1,), history=(LaunchRecord(NOW - 3 * SEC, OPT, code="Boom"),)),
        POLICY,
        NOW + 7 * SEC,
    ),
    "a capacity error's backoff ends for the only option": (
        PoolSnapshot(
            "p",
            demand=(1,),
            history=(LaunchRecord(NOW - 4 * SEC, OPT, code="Insufficient", capacity=True),),
        ),
        POLICY,
        NOW + 6 * SEC,
    ),
    "an idle agent's period ends": (
        PoolSnapshot(
            "p",
            instances=(inst("i-1", 60 * MIN),),
            agents=(AgentInfo("i-1", 1, True, NOW, idle_since=NOW - 4 * MIN),),
        ),
        POLICY,
        NOW + 6 * MIN,
    ),
    "a starting agent's period ends": (
        PoolSnapshot("p", instances=(inst("i-1", 3 * MIN),), demand=(1,)),
        POLICY,
        NOW + 5 * MIN,
    ),
    "a disconnected agent's period ends": (
        PoolSnapshot(
            "p",
            instances=(inst("i-1", 60 * MIN),),
            agents=(AgentInfo("i-1", 1, False, NOW - 2 * MIN),),
        ),
        POLICY,
        NOW + 3 * MIN,
    ),
    "a spent budget renews at the month's start": (
        PoolSnapshot("p", demand=(1,), spent=100.0),
        dataclasses.replace(POLICY, cost=CostPolicy(prices={"m5.large": 0.1}, monthly_budget=50.0)),
        dt.datetime(2026, 2, 1, tzinfo=dt.UTC),
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_next_change_is_when_the_decision_changes(name: str) -> None:
    snapshot, policy, expected = CASES[name]
    when = next_change(snapshot, policy, NOW)
    assert when is not None and abs(when - expected) < SEC, (name, when)
    before = decide(snapshot, policy, when - SEC)
    # A new month's spend starts at zero (the master sums it from the month's start).
    later = dataclasses.replace(snapshot, spent=0.0) if when.month != NOW.month else snapshot
    after = decide(later, policy, when + dt.timedelta(milliseconds=1))
    assert moves(before) != moves(after), name


def test_nothing_due_without_work_instances_or_history() -> None:
    assert next_change(PoolSnapshot("p"), POLICY, NOW) is None


def test_a_backoff_without_queued_work_is_no_reason_to_wake() -> None:
    snapshot = PoolSnapshot("p", history=(LaunchRecord(NOW - 3 * SEC, OPT, code="Boom"),))
    assert next_change(snapshot, POLICY, NOW) is None


def test_an_idle_agent_at_min_instances_is_kept_so_no_wake() -> None:
    snapshot = PoolSnapshot(
        "p",
        instances=(inst("i-1", 60 * MIN),),
        agents=(AgentInfo("i-1", 1, True, NOW, idle_since=NOW - 4 * MIN),),
    )
    assert next_change(snapshot, dataclasses.replace(POLICY, min_instances=1), NOW) is None


def test_the_earliest_of_several_times_wins() -> None:
    snapshot = PoolSnapshot(
        "p",
        demand=(1,),
        instances=(inst("i-1", 60 * MIN), inst("i-2", 7 * MIN)),
        agents=(AgentInfo("i-1", 1, True, NOW, idle_since=NOW - 4 * MIN),),
        history=(LaunchRecord(NOW - 3 * SEC, OPT2, code="Insufficient", capacity=True),),
    )
    policy = dataclasses.replace(POLICY, options=(OPT, OPT2))
    when = next_change(snapshot, policy, NOW)
    # i-2's starting period ends in 1 min, i-1's idle period in 6 min, OPT2's backoff in 7 s.
    assert when is not None and abs(when - (NOW + 7 * SEC)) < SEC


def test_times_already_past_are_not_returned() -> None:
    # The idle period ended a minute ago: the decider terminates now; nothing more is due.
    snapshot = PoolSnapshot(
        "p",
        instances=(inst("i-1", 60 * MIN),),
        agents=(AgentInfo("i-1", 1, True, NOW, idle_since=NOW - 11 * MIN),),
    )
    assert next_change(snapshot, POLICY, NOW) is None
