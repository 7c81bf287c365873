"""Table tests for agents that never register: a launch failure with a backoff, not churn.

Policy under test: max_agent_starting_period = 10 min, so a never-registered streak waits
10, 20, 40, 80 min, then the 2 h cap (``max_no_agent_backoff``); launch errors keep their
10 s base and the 5 min ``launch_error_timeout`` cap; both share one counter.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools

import pytest

from det.master.provisioner.decider import (
    AGENT_NOT_REGISTERED,
    HISTORY_HORIZON,
    AgentInfo,
    Decision,
    LaunchRecord,
    PoolSnapshot,
    ScalePolicy,
    TerminateReason,
    backoff,
    decide,
    history_horizon,
    record_launch,
)
from det.master.provisioner.provider import Instance, InstanceState, LaunchOption, Market

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
SEC = dt.timedelta(seconds=1)
MIN = dt.timedelta(minutes=1)
HOUR = dt.timedelta(hours=1)

P3 = LaunchOption("p3.8xlarge", market=Market.SPOT, slots=4)
G5 = LaunchOption("g5.12xlarge", market=Market.SPOT, slots=4)
POLICY = ScalePolicy(
    options=(P3,),
    max_instances=5,
    max_idle_agent_period=10 * MIN,
    max_agent_starting_period=10 * MIN,
    launch_error_timeout=5 * MIN,
)


def no_agent(at: dt.datetime, iid: str | None = None, option: LaunchOption = P3) -> LaunchRecord:
    return LaunchRecord(at=at, option=option, code=AGENT_NOT_REGISTERED, instance_id=iid)


def api_error(at: dt.datetime, code: str = "InvalidAMIID.NotFound") -> LaunchRecord:
    return LaunchRecord(at=at, option=P3, code=code)


def capacity_error(at: dt.datetime) -> LaunchRecord:
    return LaunchRecord(at=at, option=P3, code="InsufficientInstanceCapacity", capacity=True)


def registered(at: dt.datetime) -> LaunchRecord:
    return LaunchRecord(at=at, option=P3)


def launched(decision: Decision) -> int:
    return sum(order.count for order in decision.launches)


def wants_one(history: tuple[LaunchRecord, ...], policy: ScalePolicy = POLICY) -> Decision:
    return decide(PoolSnapshot(pool="gpu", demand=(4,), history=history), policy, NOW)


def streak(n: int, last: dt.datetime) -> tuple[LaunchRecord, ...]:
    """``n`` never-registered failures, the last at ``last``, each 30 min apart."""
    return tuple(no_agent(last - i * 30 * MIN, f"i-{i}") for i in reversed(range(n)))


# --- never-registered agents back off: intervals grow, capped ----------------------------------


def test_backoff_after_agents_that_never_registered() -> None:
    waits = [backoff(n, POLICY, no_agent=True) for n in range(7)]
    assert waits == [
        dt.timedelta(0),
        10 * MIN,
        20 * MIN,
        40 * MIN,
        80 * MIN,
        120 * MIN,  # capped at max_no_agent_backoff
        120 * MIN,
    ]
    # Launch errors keep their own base and cap.
    assert backoff(3, POLICY) == 40 * SEC
    assert backoff(9, POLICY) == 5 * MIN


@pytest.mark.parametrize(
    ("failures", "since_last", "launches"),
    [
        (1, 9 * MIN, 0),  # 1st: wait one starting period (10 min)
        (1, 10 * MIN + SEC, 1),
        (2, 19 * MIN, 0),  # 2nd: 20 min
        (2, 20 * MIN + SEC, 1),
        (3, 39 * MIN, 0),  # 3rd: 40 min
        (3, 40 * MIN + SEC, 1),
        (4, 79 * MIN, 0),  # 4th: 80 min
        (5, 119 * MIN, 0),  # 5th: 160 min capped at 2 h
        (5, 120 * MIN + SEC, 1),
        (9, 119 * MIN, 0),  # stays at the cap
        (9, 120 * MIN + SEC, 1),
    ],
)
def test_never_registered_agents_back_off_growing_and_capped(
    failures: int, since_last: dt.timedelta, launches: int
) -> None:
    decision = wants_one(streak(failures, NOW - since_last))
    assert launched(decision) == launches
    codes = [e.code for e in decision.events]
    assert ("agent-not-registered" in codes) == (launches == 0)
    assert "launch-backoff" not in codes


def test_the_waiting_reason_names_the_pool_the_period_the_next_launch_and_the_boot_log() -> None:
    decision = wants_one(streak(2, NOW - 5 * MIN))
    [event] = [e for e in decision.events if e.code == "agent-not-registered"]
    assert event.message.startswith(
        "agents launched in pool 'gpu' did not register within 10m (2 of the last 2 launch"
        " failures) (last: i-0); next launch in 15m (at 2026-01-01T12:15:00+00:00)"
    )
    assert event.message.endswith("see the instance's boot log")


def test_a_simulated_pool_whose_agents_never_register_slows_down_to_the_cap() -> None:
    """An offline run of the decider with the apply step a master does: minute by minute for
    a day, demand for one instance, a cloud whose machines never start an agent."""
    now = NOW
    instances: dict[str, Instance] = {}
    history: tuple[LaunchRecord, ...] = ()
    launch_times: list[dt.datetime] = []
    while now < NOW + 24 * HOUR:
        snapshot = PoolSnapshot(
            pool="gpu", demand=(4,), instances=tuple(instances.values()), history=history
        )
        decision = decide(snapshot, POLICY, now)
        for term in decision.terminations:
            assert term.reason is TerminateReason.NEVER_CONNECTED
            del instances[term.instance_id]
            record = no_agent(now, term.instance_id)
            history = record_launch(history, record, now, POLICY)
        for order in decision.launches:
            for _ in range(order.count):
                iid = f"i-{len(launch_times)}"
                instances[iid] = Instance(iid, InstanceState.RUNNING, now, P3.instance_type)
                launch_times.append(now)
        now += MIN
    gaps = [(b - a) // MIN for a, b in itertools.pairwise(launch_times)]
    # Each gap: the starting period (10 min, plus the minute the pass sees it) and the wait.
    assert gaps[:6] == [21, 31, 51, 91, 131, 131]
    assert set(gaps[4:]) == {131}  # held at the cap for the rest of the day
    assert len(launch_times) == 14  # churn every starting period would be 131


# --- a registering agent resets the counter ----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "history", "launches"),
    [
        ("three failures hold", streak(3, NOW - 30 * MIN), 0),
        ("an agent registered after them", (*streak(3, NOW - 30 * MIN), registered(NOW - MIN)), 1),
        (
            "one failure since the registration: back to the first wait (10 min)",
            (*streak(3, NOW - 60 * MIN), registered(NOW - 40 * MIN), no_agent(NOW - 11 * MIN)),
            1,
        ),
        (
            "… which still holds within it",
            (*streak(3, NOW - 60 * MIN), registered(NOW - 40 * MIN), no_agent(NOW - 9 * MIN)),
            0,
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_a_registered_agent_resets_the_backoff(
    name: str, history: tuple[LaunchRecord, ...], launches: int
) -> None:
    assert launched(wants_one(history)) == launches, name


# --- launch errors and never-registered agents share one counter ------------------------------


@pytest.mark.parametrize(
    ("name", "history", "held_for"),
    [
        # The streak length counts both kinds; the last failure's kind picks base and cap.
        ("launch error then no agent: 2nd failure, agent base", (api_error(NOW - HOUR), no_agent(NOW)), 20 * MIN),
        ("no agent then launch error: 2nd failure, error base", (no_agent(NOW - HOUR), api_error(NOW)), 20 * SEC),
        (
            "three of each, last an error: capped at launch_error_timeout",
            (*streak(3, NOW - 30 * MIN), api_error(NOW - 3 * MIN), api_error(NOW - 2 * MIN), api_error(NOW)),
            5 * MIN,
        ),
        (
            "capacity errors hold only their option and do not join the counter",
            (no_agent(NOW - 2 * MIN), capacity_error(NOW - MIN), no_agent(NOW)),
            20 * MIN,
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)  # fmt: skip
def test_launch_errors_and_never_registered_agents_share_the_counter(
    name: str, history: tuple[LaunchRecord, ...], held_for: dt.timedelta
) -> None:
    policy = dataclasses.replace(POLICY, options=(P3, G5))
    before = decide(
        PoolSnapshot(pool="gpu", demand=(4,), history=history), policy, NOW + held_for - SEC
    )
    after = decide(
        PoolSnapshot(pool="gpu", demand=(4,), history=history), policy, NOW + held_for + SEC
    )
    assert (launched(before), launched(after)) == (0, 1), name


def test_launch_error_retries_count_never_registered_agents_too() -> None:
    policy = dataclasses.replace(POLICY, launch_error_retries=2)
    two = (api_error(NOW - 2 * MIN), no_agent(NOW - MIN))
    assert launched(wants_one(two, policy)) == 1
    assert launched(wants_one((*two, no_agent(NOW)), policy)) == 0


# --- the pass that finds the missing agent ------------------------------------------------------


def late(iid: str, age: dt.timedelta = 11 * MIN) -> Instance:
    return Instance(iid, InstanceState.RUNNING, NOW - age, P3.instance_type, market=Market.SPOT)


def test_the_pass_that_terminates_it_does_not_launch_a_replacement() -> None:
    snapshot = PoolSnapshot(pool="gpu", demand=(4,), instances=(late("i-a"),))
    decision = decide(snapshot, POLICY, NOW)
    assert [(t.instance_id, t.reason) for t in decision.terminations] == [
        ("i-a", TerminateReason.NEVER_CONNECTED)
    ]
    assert decision.launches == ()
    [event] = [e for e in decision.events if e.code == "agent-not-registered"]
    assert "(last: i-a)" in event.message and "next launch in 10m" in event.message


def test_a_failure_already_recorded_for_the_instance_is_not_counted_twice() -> None:
    # The cloud still lists the instance a minute after the master recorded its failure.
    snapshot = PoolSnapshot(
        pool="gpu",
        demand=(4,),
        instances=(late("i-a"),),
        history=(no_agent(NOW - MIN, "i-a"),),
    )
    [event] = [e for e in decide(snapshot, POLICY, NOW).events if e.code == "agent-not-registered"]
    assert "(1 of the last 1 launch failures)" in event.message
    assert "next launch in 9m" in event.message


def test_a_registered_agent_in_the_same_pool_is_no_failure() -> None:
    agent = AgentInfo("i-a", slots=4, connected=True, last_heartbeat=NOW)
    snapshot = PoolSnapshot(pool="gpu", demand=(4, 4), instances=(late("i-a"),), agents=(agent,))
    decision = decide(snapshot, POLICY, NOW)
    assert decision.terminations == () and launched(decision) == 2


def test_the_history_horizon_keeps_a_capped_streak() -> None:
    # At the cap, failures come 10 min + 2 h apart; four of them (10·2^3 ≥ 120) must fit.
    horizon = history_horizon(POLICY)
    assert horizon >= 4 * (10 * MIN + 2 * HOUR)
    assert history_horizon(dataclasses.replace(POLICY, max_agent_starting_period=SEC)) > horizon
    assert horizon >= HISTORY_HORIZON
