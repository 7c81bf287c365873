"""Table tests for the scale decider: each of Determined's rules, then each improvement."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from det.master.provisioner.decider import (
    AgentInfo,
    LaunchRecord,
    PoolSnapshot,
    ScalePolicy,
    TerminateReason,
    backoff,
    decide,
    record_launch,
)
from det.master.provisioner.provider import Instance, InstanceState, LaunchOption, Market

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
MIN = dt.timedelta(minutes=1)
SEC = dt.timedelta(seconds=1)

P3 = LaunchOption("p3.8xlarge", market=Market.SPOT, slots=4)
G5 = LaunchOption("g5.12xlarge", market=Market.SPOT, slots=4)
P3_OD = LaunchOption("p3.8xlarge", market=Market.ON_DEMAND, slots=4)
POLICY = ScalePolicy(
    options=(P3,),
    min_instances=0,
    max_instances=5,
    max_idle_agent_period=10 * MIN,
    max_agent_starting_period=10 * MIN,
    max_agent_disconnected_period=5 * MIN,
    launch_error_timeout=5 * MIN,
)


def inst(
    id: str, state: InstanceState = InstanceState.RUNNING, age: dt.timedelta = 60 * MIN
) -> Instance:
    return Instance(id=id, state=state, launched_at=NOW - age, instance_type="p3.8xlarge")


def idle_agent(id: str, idle_for: dt.timedelta) -> AgentInfo:
    return AgentInfo(id=id, slots=4, connected=True, last_heartbeat=NOW, idle_since=NOW - idle_for)


def busy_agent(id: str) -> AgentInfo:
    return AgentInfo(id=id, slots=4, connected=True, last_heartbeat=NOW)


def gone_agent(id: str, silent_for: dt.timedelta) -> AgentInfo:
    return AgentInfo(id=id, slots=4, connected=False, last_heartbeat=NOW - silent_for)


def snap(**kw: object) -> PoolSnapshot:
    return PoolSnapshot(pool="gpu", **kw)  # type: ignore[arg-type]


def launched(decision) -> int:  # type: ignore[no-untyped-def]
    return sum(order.count for order in decision.launches)


def terminated(decision) -> dict[str, TerminateReason]:  # type: ignore[no-untyped-def]
    return {t.instance_id: t.reason for t in decision.terminations}


# --- launches: clamp(min - n, desired - starting, max - n) ------------------------------------


@pytest.mark.parametrize(
    ("name", "snapshot", "policy", "expected"),
    [
        ("nothing pending, nothing running", snap(), POLICY, 0),
        ("one 4-slot request needs one instance", snap(demand=(4,)), POLICY, 1),
        ("two 2-slot requests share one instance", snap(demand=(2, 2)), POLICY, 1),
        ("3+2 slots need two instances", snap(demand=(3, 2)), POLICY, 2),
        ("an 8-slot gang takes two whole instances", snap(demand=(8,)), POLICY, 2),
        ("mixed gangs: 8 + 3 + 1", snap(demand=(8, 3, 1)), POLICY, 3),
        ("zero-slot tasks need one instance", snap(demand=(0, 0, 0)), POLICY, 1),
        (
            "capped by max_instances",
            snap(demand=(4,) * 9),
            POLICY,
            5,
        ),
        (
            "running instances count against max",
            snap(
                demand=(4,) * 9,
                instances=(inst("a"), inst("b")),
                agents=(busy_agent("a"), busy_agent("b")),
            ),
            POLICY,
            3,
        ),
        (
            "starting instances cover demand",
            snap(demand=(4, 4), instances=(inst("a", InstanceState.STARTING, MIN),)),
            POLICY,
            1,
        ),
        (
            "min_instances launched without demand",
            snap(),
            dataclasses.replace(POLICY, min_instances=2),
            2,
        ),
        (
            "min_instances counts live instances",
            snap(instances=(inst("a"),), agents=(busy_agent("a"),)),
            dataclasses.replace(POLICY, min_instances=2),
            1,
        ),
        (
            "stopped instances do not count as live",
            snap(demand=(4,), instances=(inst("a", InstanceState.STOPPED),)),
            POLICY,
            1,
        ),
        (
            "terminating instances are ignored",
            snap(demand=(4,), instances=(inst("a", InstanceState.TERMINATING, MIN),)),
            POLICY,
            1,
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_launch_count(
    name: str, snapshot: PoolSnapshot, policy: ScalePolicy, expected: int
) -> None:
    decision = decide(snapshot, policy, NOW)
    assert launched(decision) == expected, name
    for order in decision.launches:
        assert order.reason
        assert order.option == policy.options[0]


# --- terminations ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "snapshot", "policy", "expected"),
    [
        (
            "stopped instance",
            snap(instances=(inst("a", InstanceState.STOPPED),)),
            POLICY,
            {"a": TerminateReason.STOPPED},
        ),
        (
            "agent never connected within the starting period",
            snap(instances=(inst("a", InstanceState.RUNNING, 11 * MIN),)),
            POLICY,
            {"a": TerminateReason.NEVER_CONNECTED},
        ),
        (
            "still within the starting period",
            snap(instances=(inst("a", InstanceState.STARTING, 9 * MIN),)),
            POLICY,
            {},
        ),
        (
            "agent disconnected too long",
            snap(instances=(inst("a"),), agents=(gone_agent("a", 6 * MIN),)),
            POLICY,
            {"a": TerminateReason.DISCONNECTED},
        ),
        (
            "agent briefly disconnected",
            snap(instances=(inst("a"),), agents=(gone_agent("a", 1 * MIN),)),
            POLICY,
            {},
        ),
        (
            "idle past max_idle_agent_period",
            snap(instances=(inst("a"),), agents=(idle_agent("a", 11 * MIN),)),
            POLICY,
            {"a": TerminateReason.IDLE},
        ),
        (
            "idle but not long enough",
            snap(instances=(inst("a"),), agents=(idle_agent("a", 9 * MIN),)),
            POLICY,
            {},
        ),
        ("busy agent is kept", snap(instances=(inst("a"),), agents=(busy_agent("a"),)), POLICY, {}),
        (
            "idle never below min_instances (longest idle goes first)",
            snap(
                instances=(inst("a"), inst("b"), inst("c")),
                agents=(
                    idle_agent("a", 20 * MIN),
                    idle_agent("b", 30 * MIN),
                    idle_agent("c", 40 * MIN),
                ),
            ),
            dataclasses.replace(POLICY, min_instances=2),
            {"c": TerminateReason.IDLE},
        ),
        (
            "above max: starting (newest) first, then idle, then newest busy",
            snap(
                instances=(
                    inst("busy-old", age=50 * MIN),
                    inst("busy-new", age=30 * MIN),
                    inst("idle", age=40 * MIN),
                    inst("starting", InstanceState.STARTING, MIN),
                ),
                agents=(busy_agent("busy-old"), busy_agent("busy-new"), idle_agent("idle", MIN)),
            ),
            dataclasses.replace(POLICY, max_instances=1),
            {
                "starting": TerminateReason.ABOVE_MAX,
                "idle": TerminateReason.ABOVE_MAX,
                "busy-new": TerminateReason.ABOVE_MAX,
            },
        ),
        (
            "agents without an instance (static agents) are not touched",
            snap(agents=(idle_agent("static", 60 * MIN),)),
            POLICY,
            {},
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_terminations(
    name: str, snapshot: PoolSnapshot, policy: ScalePolicy, expected: dict[str, TerminateReason]
) -> None:
    decision = decide(snapshot, policy, NOW)
    assert terminated(decision) == expected, name
    messages = " ".join(e.message for e in decision.events)
    for instance_id in expected:
        assert instance_id in messages


def test_replaces_a_terminated_instance_to_keep_min() -> None:
    snapshot = snap(instances=(inst("a"),), agents=(gone_agent("a", 30 * MIN),))
    decision = decide(snapshot, dataclasses.replace(POLICY, min_instances=1), NOW)
    assert terminated(decision) == {"a": TerminateReason.DISCONNECTED}
    assert launched(decision) == 1
    assert "min_instances" in decision.launches[0].reason


def test_idle_agent_kept_at_min_says_why() -> None:
    snapshot = snap(instances=(inst("a"),), agents=(idle_agent("a", 60 * MIN),))
    decision = decide(snapshot, dataclasses.replace(POLICY, min_instances=1), NOW)
    assert decision.terminations == ()
    assert [e.code for e in decision.events] == ["keep-min"]


# --- improvement: no launches for work that cannot fit -----------------------------------------


@pytest.mark.parametrize(
    ("demand", "expected_launch", "unfit"),
    [
        ((6,), 0, 1),  # 6 slots: more than one 4-slot instance, not a multiple of 4
        ((24,), 0, 1),  # 6 whole instances > max_instances=5
        ((6, 4), 1, 1),  # the fitting request still launches
        ((20,), 5, 0),  # 5 whole instances: exactly max
    ],
)
def test_unfittable_requests_launch_nothing_and_say_so(
    demand: tuple[int, ...], expected_launch: int, unfit: int
) -> None:
    decision = decide(snap(demand=demand), POLICY, NOW)
    assert launched(decision) == expected_launch
    events = [e for e in decision.events if e.code == "cannot-fit"]
    assert len(events) == unfit
    for event in events:
        assert "fits no instance" in event.message and "p3.8xlarge" in event.message


def test_zero_slot_instance_type_hosts_only_zero_slot_work() -> None:
    cpu = LaunchOption("c5.large", slots=0)
    policy = dataclasses.replace(POLICY, options=(cpu,))
    assert launched(decide(snap(demand=(1,)), policy, NOW)) == 0
    assert launched(decide(snap(demand=(0,)), policy, NOW)) == 1


def test_at_max_emits_an_event() -> None:
    decision = decide(snap(demand=(4,) * 7), POLICY, NOW)
    assert launched(decision) == 5
    assert any(e.code == "at-max" for e in decision.events)


# --- improvement: launch errors back off -------------------------------------------------------


def fail(
    at: dt.datetime,
    option: LaunchOption = P3,
    code: str = "InvalidAMIID.NotFound",
    capacity: bool = False,
) -> LaunchRecord:
    return LaunchRecord(at=at, option=option, code=code, capacity=capacity)


@pytest.mark.parametrize(
    ("failures", "since_last", "launches"),
    [
        (1, 5 * SEC, 0),  # 1st failure: wait 10 s
        (1, 11 * SEC, 1),
        (2, 15 * SEC, 0),  # 2nd: 20 s
        (2, 21 * SEC, 1),
        (3, 39 * SEC, 0),  # 3rd: 40 s
        (3, 41 * SEC, 1),
        (10, 4 * MIN, 0),  # capped at launch_error_timeout = 5 min
        (10, 5 * MIN + SEC, 1),
    ],
)
def test_errors_back_off_exponentially_with_a_cap(
    failures: int, since_last: dt.timedelta, launches: int
) -> None:
    last = NOW - since_last
    history = tuple(fail(last - i * SEC) for i in reversed(range(failures)))
    decision = decide(snap(demand=(4,), history=history), POLICY, NOW)
    assert launched(decision) == launches
    if not launches:
        assert any(e.code == "launch-backoff" for e in decision.events)


def test_backoff_formula() -> None:
    assert [backoff(n, POLICY).total_seconds() for n in range(0, 7)] == [
        0,
        10,
        20,
        40,
        80,
        160,
        300,
    ]


def test_success_resets_the_streak() -> None:
    history = (
        fail(NOW - 20 * SEC),
        fail(NOW - 15 * SEC),
        LaunchRecord(at=NOW - 12 * SEC, option=P3),
        fail(NOW - 11 * SEC),
    )
    # One failure since the success: 10 s, already over.
    assert launched(decide(snap(demand=(4,), history=history), POLICY, NOW)) == 1


def test_launch_error_retries_tolerates_errors_before_backing_off() -> None:
    policy = dataclasses.replace(POLICY, launch_error_retries=2)
    two = (fail(NOW - 2 * SEC), fail(NOW - SEC))
    assert launched(decide(snap(demand=(4,), history=two), policy, NOW)) == 1
    three = (*two, fail(NOW))
    assert launched(decide(snap(demand=(4,), history=three), policy, NOW)) == 0


def test_old_errors_are_forgotten() -> None:
    history = tuple(fail(NOW - 2 * dt.timedelta(hours=1) - i * SEC) for i in range(20))
    assert launched(decide(snap(demand=(4,), history=history), POLICY, NOW)) == 1


def test_no_backoff_event_without_demand() -> None:
    decision = decide(snap(history=(fail(NOW),)), POLICY, NOW)
    assert decision.events == ()


# --- improvement: capacity errors walk the fallback list ---------------------------------------

FALLBACK = dataclasses.replace(POLICY, options=(P3, G5, P3_OD))


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        ((), P3),
        ((fail(NOW - SEC, P3, "InsufficientInstanceCapacity", True),), G5),
        (
            (
                fail(NOW - 2 * SEC, P3, "InsufficientInstanceCapacity", True),
                fail(NOW - SEC, G5, "MaxSpotInstanceCountExceeded", True),
            ),
            P3_OD,
        ),
        # The P3 spot backoff (10 s) is over: back to the first choice.
        ((fail(NOW - 11 * SEC, P3, "InsufficientInstanceCapacity", True),), P3),
        # Two capacity failures on P3: 20 s, still held.
        (
            (
                fail(NOW - 60 * SEC, P3, "InsufficientInstanceCapacity", True),
                fail(NOW - 15 * SEC, P3, "InsufficientInstanceCapacity", True),
            ),
            G5,
        ),
    ],
)
def test_capacity_errors_move_down_the_fallback_list(
    history: tuple[LaunchRecord, ...], expected: LaunchOption
) -> None:
    decision = decide(snap(demand=(4,), history=history), FALLBACK, NOW)
    assert [o.option for o in decision.launches] == [expected]
    if expected != P3:
        assert any(e.code == "fallback" and "skipped" in e.message for e in decision.events)


def test_every_option_without_capacity_waits_and_says_so() -> None:
    history = tuple(
        fail(NOW - SEC, option, "InsufficientInstanceCapacity", True) for option in FALLBACK.options
    )
    decision = decide(snap(demand=(4,), history=history), FALLBACK, NOW)
    assert decision.launches == ()
    [event] = [e for e in decision.events if e.code == "no-capacity"]
    assert "g5.12xlarge" in event.message and "on_demand" in event.message


QUOTA_MESSAGE = (
    "You have requested more vCPU capacity than your current vCPU limit of 0 allows. This is the"
    " account's EC2 quota in us-west-2, not capacity: ask for more in the Service Quotas console"
)


def quota(at: dt.datetime, option: LaunchOption = P3) -> LaunchRecord:
    return LaunchRecord(
        at=at, option=option, code="VcpuLimitExceeded", capacity=True, message=QUOTA_MESSAGE
    )


def test_quota_is_not_capacity_the_job_waits_naming_the_quota() -> None:
    # The only option was refused for quota 5 minutes ago: a capacity refusal would be retried
    # by now (10 s), a quota one waits on its own clock and says why.
    decision = decide(snap(demand=(4,), history=(quota(NOW - 5 * MIN),)), POLICY, NOW)
    assert decision.launches == ()
    assert not [e for e in decision.events if e.code == "no-capacity"]
    [event] = [e for e in decision.events if e.code == "quota-exceeded"]
    assert "wait for quota, not capacity" in event.message
    assert "VcpuLimitExceeded" in event.message and "in us-west-2" in event.message
    assert "Service Quotas" in event.message and "p3.8xlarge" in event.message
    capacity = fail(NOW - 5 * MIN, P3, "InsufficientInstanceCapacity", True)
    assert launched(decide(snap(demand=(4,), history=(capacity,)), POLICY, NOW)) == 1


def test_quota_backs_off_on_its_own_clock() -> None:
    policy = dataclasses.replace(POLICY, quota_backoff=10 * MIN, max_quota_backoff=60 * MIN)
    once = (quota(NOW - 11 * MIN),)
    assert launched(decide(snap(demand=(4,), history=once), policy, NOW)) == 1
    twice = (quota(NOW - 31 * MIN), quota(NOW - 11 * MIN))
    assert launched(decide(snap(demand=(4,), history=twice), policy, NOW)) == 0  # waits 20 min
    assert launched(decide(snap(demand=(4,), history=twice), policy, NOW + 10 * MIN)) == 1


def test_quota_on_one_option_falls_back_to_the_next() -> None:
    decision = decide(snap(demand=(4,), history=(quota(NOW - MIN),)), FALLBACK, NOW)
    assert [o.option for o in decision.launches] == [G5]
    [event] = [e for e in decision.events if e.code == "fallback"]
    assert "quota VcpuLimitExceeded" in event.message


def test_capacity_error_on_one_option_does_not_hold_the_others() -> None:
    # Non-capacity errors hold everything; capacity errors only their option.
    history = (fail(NOW - SEC, P3, "InsufficientInstanceCapacity", True),)
    assert launched(decide(snap(demand=(4,), history=history), FALLBACK, NOW)) == 1
    history = (fail(NOW - SEC, P3, "UnauthorizedOperation", False),)
    assert launched(decide(snap(demand=(4,), history=history), FALLBACK, NOW)) == 0


def test_demand_sized_for_the_fallback_option() -> None:
    small = LaunchOption("g5.xlarge", slots=1)
    policy = dataclasses.replace(POLICY, options=(P3, small))
    history = (fail(NOW - SEC, P3, "InsufficientInstanceCapacity", True),)
    decision = decide(snap(demand=(1, 1, 1)), policy, NOW)
    assert [(o.option, o.count) for o in decision.launches] == [(P3, 1)]
    decision = decide(snap(demand=(1, 1, 1), history=history), policy, NOW)
    assert [(o.option, o.count) for o in decision.launches] == [(small, 3)]


# --- bookkeeping -------------------------------------------------------------------------------


def test_record_launch_appends_and_drops_expired() -> None:
    old = fail(NOW - 2 * dt.timedelta(hours=1))
    recent = fail(NOW - MIN)
    new = LaunchRecord(at=NOW, option=P3)
    assert record_launch((old, recent), new, NOW) == (recent, new)


def test_decide_is_deterministic() -> None:
    snapshot = snap(
        demand=(4, 8, 1),
        instances=(inst("a"), inst("b", InstanceState.STOPPED), inst("c", age=MIN)),
        agents=(idle_agent("a", 30 * MIN),),
    )
    assert decide(snapshot, POLICY, NOW) == decide(snapshot, POLICY, NOW)
