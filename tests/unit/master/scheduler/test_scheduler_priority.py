"""The priority scheduler: ordering, blocking and backfill, and preemption."""

from __future__ import annotations

import pytest

from det.master.scheduler import Request
from tests.unit.master.scheduler.factories import agent, ids, pending, run, running


def _placed(requests: list[Request], *, preemption: bool = False, slots: int = 4) -> set[str]:
    return set(run([agent("a", slots)], requests, preemption=preemption).placements)


@pytest.mark.parametrize(
    ("requests", "expected"),
    [
        ([pending("low", 4, priority=50), pending("high", 4, priority=10)], {"high"}),
        ([pending("low", 4, priority=99), pending("high", 4, priority=1)], {"high"}),
        ([pending("default", 4), pending("high", 4, priority=41)], {"high"}),
        ([pending("default", 4), pending("low", 4, priority=43)], {"default"}),
    ],
)
def test_lower_priority_number_runs_first(requests: list[Request], expected: set[str]) -> None:
    assert _placed(requests) == expected


@pytest.mark.parametrize(
    ("requests", "expected"),
    [
        ([pending("second", 4, order=2), pending("first", 4, order=1)], {"first"}),
        ([pending("first", 4, order=1), pending("second", 4, order=2)], {"first"}),
        # Equal order: the allocation id decides, so the pass is deterministic.
        ([pending("b", 4, order=1), pending("a", 4, order=1)], {"a"}),
    ],
)
def test_equal_priorities_run_in_submission_order(
    requests: list[Request], expected: set[str]
) -> None:
    assert _placed(requests) == expected


def test_a_gang_that_does_not_fit_does_not_block_smaller_ones_of_its_priority() -> None:
    agents = [agent("a", 4), agent("b", 4)]
    requests = [running("r", {"a": ids(0)}), pending("big", 8), pending("small", 2)]
    assert set(run(agents, requests).placements) == {"small"}


@pytest.mark.parametrize(
    ("preemption", "preemptible", "backfilled"),
    [(False, True, False), (True, True, True), (True, False, False)],
)
def test_a_blocked_priority_holds_back_lower_priorities_unless_they_can_be_preempted(
    preemption: bool, preemptible: bool, backfilled: bool
) -> None:
    agents = [agent("a", 4), agent("b", 4)]
    requests = [
        running("r", {"a": ids(0)}, priority=1, preemptible=False),
        pending("big", 8, priority=10),
        pending("low", 2, priority=50, preemptible=preemptible),
    ]
    decision = run(agents, requests, preemption=preemption)
    assert ("low" in decision.placements) is backfilled
    assert decision.preemptions == ()


def test_round_robin_ignores_priorities() -> None:
    requests = [
        pending("first", 4, priority=90, order=1),
        pending("second", 4, priority=1, order=2),
    ]
    assert set(run([agent("a", 4)], requests, "round_robin").placements) == {"first"}


# -- preemption ----------------------------------------------------------------------------------

_FULL_AGENT = [
    running("p50-old", {"a": ids(0)}, priority=50, order=1),
    running("p50-new", {"a": ids(1)}, priority=50, order=2),
    running("p60", {"a": ids(2, 3)}, priority=60, order=0),
]


@pytest.mark.parametrize(
    ("slots", "expected"),
    [
        (2, ["p60"]),  # the lowest priority frees exactly enough
        (1, ["p60"]),  # the lowest priority goes first even if larger than needed
        (3, ["p60", "p50-new"]),  # then the most recently submitted of the next priority
        (4, ["p60", "p50-new", "p50-old"]),
    ],
)
def test_preemption_takes_lowest_priority_then_most_recent_and_only_what_is_needed(
    slots: int, expected: list[str]
) -> None:
    decision = run(
        [agent("a", 4)], [*_FULL_AGENT, pending("h", slots, priority=10)], preemption=True
    )
    assert list(decision.preemptions) == expected
    assert decision.waiting == ("h",)
    assert decision.placements == {}


def test_among_equal_priorities_the_most_recently_started_is_preempted_first() -> None:
    requests = [
        running("early-start", {"a": ids(0, 1)}, priority=60, order=2, started=100.0),
        running("late-start", {"a": ids(2, 3)}, priority=60, order=1, started=200.0),
        pending("h", 2, priority=10),
    ]
    decision = run([agent("a", 4)], requests, preemption=True)
    assert decision.preemptions == ("late-start",)


def test_no_preemption_when_disabled() -> None:
    decision = run([agent("a", 4)], [*_FULL_AGENT, pending("h", 2, priority=10)])
    assert decision.preemptions == ()
    assert decision.waiting == ()
    assert decision.placements == {}


def test_victims_on_agents_the_gang_will_not_use_are_spared() -> None:
    agents = [agent("a", 4), agent("b", 4)]
    requests = [
        running("a-p60", {"a": ids(0, 1)}, priority=60, order=5),
        running("a-p42", {"a": ids(2, 3)}, priority=42),
        running("b-p70", {"b": ids(0)}, priority=70),
        running("b-p60", {"b": ids(1, 2, 3)}, priority=60, order=1),
        pending("h", 2, priority=10),
    ]
    # Walk: b-p70 (b has 1 free: no), then a-p60 (later than b-p60; a has 2 free: fits).
    decision = run(agents, requests, preemption=True)
    assert decision.preemptions == ("a-p60",)


def test_a_victim_made_unnecessary_by_a_later_one_is_spared() -> None:
    requests = [
        running("p90", {"a": ids(0)}, priority=90),
        running("p80", {"a": ids(1, 2)}, priority=80),
        running("p70", {"a": ids(3)}, priority=70),
        pending("h", 2, priority=10),
    ]
    decision = run([agent("a", 4)], requests, preemption=True)
    assert decision.preemptions == ("p80",)


@pytest.mark.parametrize(
    "requests",
    [
        # Victims must have a strictly lower priority (a higher number).
        [running("r", {"a": ids(0, 1, 2, 3)}, priority=50), pending("h", 2, priority=50)],
        [running("r", {"a": ids(0, 1, 2, 3)}, priority=10), pending("h", 2, priority=50)],
        # Non-preemptible work is never preempted.
        [
            running("r", {"a": ids(0, 1, 2, 3)}, priority=90, preemptible=False),
            pending("h", 2, priority=10),
        ],
        # Preempting everything eligible would still not make room: preempt nothing.
        [
            running("r90", {"a": ids(0)}, priority=90),
            running("r5", {"a": ids(1, 2, 3)}, priority=5),
            pending("h", 4, priority=10),
        ],
    ],
)
def test_no_preemption_that_cannot_or_must_not_help(requests: list[Request]) -> None:
    decision = run([agent("a", 4)], requests, preemption=True)
    assert decision.preemptions == ()
    assert decision.waiting == ()


def test_work_already_stopping_is_counted_and_not_preempted_again() -> None:
    requests = [
        running("stopping", {"a": ids(0, 1)}, priority=60, preempting=True),
        running("other", {"a": ids(2, 3)}, priority=60),
        pending("h", 2, priority=10),
    ]
    decision = run([agent("a", 4)], requests, preemption=True)
    assert decision.preemptions == ()
    assert decision.waiting == ("h",)


def test_slots_freed_for_a_waiting_gang_are_held_from_lower_priorities() -> None:
    agents = [agent("a", 4), agent("c", 2)]
    requests = [
        running("victim", {"a": ids(0, 1)}, priority=90),
        pending("h", 4, priority=10),
        pending("low", 2, priority=50),
        pending("lower", 2, priority=60),
    ]
    decision = run(agents, requests, preemption=True)
    assert decision.preemptions == ("victim",)
    # a's two free slots are held for h; only c's slots are free for backfill.
    assert decision.placements == {"low": {"c": ids(0, 1)}}


def test_two_waiting_gangs_do_not_share_victims() -> None:
    requests = [
        running("v1", {"a": ids(0, 1)}, priority=90, order=1),
        running("v2", {"a": ids(2, 3)}, priority=90, order=2),
        pending("h1", 2, priority=10),
        pending("h2", 2, priority=10),
    ]
    decision = run([agent("a", 4)], requests, preemption=True)
    assert decision.preemptions == ("v2", "v1")
    assert decision.waiting == ("h1", "h2")


def test_preemption_can_free_whole_agents_for_a_multi_agent_gang() -> None:
    agents = [agent("a", 4), agent("b", 4), agent("c", 4)]
    requests = [
        running("a1", {"a": ids(0, 1, 2, 3)}, priority=42, order=1),
        running("b1", {"b": ids(0, 1)}, priority=90, order=2),
        running("c1", {"c": ids(0)}, priority=80, order=3),
        pending("h", 8, priority=10),
    ]
    decision = run(agents, requests, preemption=True)
    assert set(decision.preemptions) == {"b1", "c1"}
    assert decision.waiting == ("h",)
