"""The fair-share scheduler: weighted shares of the pool, in whole gangs."""

from __future__ import annotations

from collections import Counter

import pytest

from det.master.scheduler import Decision
from tests.unit.master.scheduler.factories import agent, ids, pending, run, running

_EIGHT_SLOTS = [agent("a", 4), agent("b", 4)]


def _slots_by_job(decision: Decision) -> Counter[str]:
    jobs = {e.allocation_id: e.job_id for e in decision.queue}
    out: Counter[str] = Counter()
    for allocation_id, placement in decision.placements.items():
        out[jobs[allocation_id]] += sum(len(s) for s in placement.values())
    return out


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        ({"A": 1.0, "B": 1.0}, {"A": 4, "B": 4}),
        ({"A": 1.0, "B": 3.0}, {"A": 2, "B": 6}),
        ({"A": 3.0, "B": 1.0}, {"A": 6, "B": 2}),
        ({"A": 1.0, "B": 1.0, "C": 2.0}, {"A": 2, "B": 2, "C": 4}),
    ],
)
def test_slots_are_divided_among_jobs_by_weight(
    weights: dict[str, float], expected: dict[str, int]
) -> None:
    requests = [
        pending(f"{job}{i}", 1, job=job, weight=w, order=i * 10 + n)
        for n, (job, w) in enumerate(weights.items())
        for i in range(8)
    ]
    assert _slots_by_job(run(_EIGHT_SLOTS, requests, "fair_share")) == expected


def test_a_job_alone_may_use_the_whole_pool() -> None:
    requests = [pending(f"A{i}", 1, job="A") for i in range(12)]
    decision = run(_EIGHT_SLOTS, requests, "fair_share")
    assert _slots_by_job(decision) == {"A": 8}


def test_a_job_uses_what_another_cannot_take() -> None:
    # B wants only one slot: A gets the other seven, whatever the weights.
    requests = [pending("B0", 1, job="B", weight=5.0)] + [
        pending(f"A{i}", 1, job="A") for i in range(10)
    ]
    assert _slots_by_job(run(_EIGHT_SLOTS, requests, "fair_share")) == {"A": 7, "B": 1}


def test_gangs_are_granted_whole() -> None:
    requests = [pending("A-gang", 4, job="A")] + [pending(f"B{i}", 1, job="B") for i in range(8)]
    decision = run(_EIGHT_SLOTS, requests, "fair_share")
    assert decision.placements["A-gang"] == {"a": ids(0, 1, 2, 3)}
    assert _slots_by_job(decision) == {"A": 4, "B": 4}


@pytest.mark.parametrize(("gang_first", "expected"), [(True, {"A": 8}), (False, {"B": 7})])
def test_a_gang_is_granted_whole_when_its_turn_comes_or_not_at_all(
    gang_first: bool, expected: dict[str, int]
) -> None:
    # Shares tie at zero and the earlier job goes first: A's 8-slot gang takes the pool when
    # A came first; when B came first, B's first trial leaves too little for the gang, and B
    # takes what the gang cannot use instead of letting it idle.
    a_order, b_order = (0, 1) if gang_first else (100, 0)
    requests = [pending("A-gang", 8, job="A", order=a_order)] + [
        pending(f"B{i}", 1, job="B", order=b_order + i) for i in range(7)
    ]
    assert _slots_by_job(run(_EIGHT_SLOTS, requests, "fair_share")) == expected


def test_a_job_over_its_share_gives_back_its_latest_trials() -> None:
    requests = [
        running(f"A{i}", {"ab"[i // 4]: ids(i % 4)}, job="A", order=i) for i in range(8)
    ] + [pending(f"B{i}", 1, job="B", order=100 + i) for i in range(8)]
    decision = run(_EIGHT_SLOTS, requests, "fair_share")
    assert sorted(decision.preemptions) == ["A4", "A5", "A6", "A7"]
    assert decision.waiting == ("B0", "B1", "B2", "B3")
    assert decision.placements == {}


def test_non_preemptible_work_keeps_running_over_its_share() -> None:
    requests = [
        running(f"A{i}", {"ab"[i // 4]: ids(i % 4)}, job="A", preemptible=False, order=i)
        for i in range(8)
    ] + [pending(f"B{i}", 1, job="B", order=100 + i) for i in range(8)]
    decision = run(_EIGHT_SLOTS, requests, "fair_share")
    assert decision.preemptions == ()
    assert decision.placements == {}


def test_a_job_at_its_share_is_left_alone() -> None:
    requests = [running(f"A{i}", {"a": ids(i)}, job="A", order=i) for i in range(4)] + [
        pending(f"B{i}", 1, job="B", order=100 + i) for i in range(8)
    ]
    decision = run(_EIGHT_SLOTS, requests, "fair_share")
    assert decision.preemptions == ()
    assert _slots_by_job(decision) == {"B": 4}


def test_zero_slot_tasks_are_placed_outside_the_share() -> None:
    requests = [pending(f"A{i}", 1, job="A") for i in range(8)] + [pending("nb", 0, job="N")]
    decision = run(_EIGHT_SLOTS, requests, "fair_share")
    assert _slots_by_job(decision)["A"] == 8
    assert next(iter(decision.placements["nb"].values())) == ()
