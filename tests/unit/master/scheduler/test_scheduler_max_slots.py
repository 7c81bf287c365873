"""An experiment's ``resources.max_slots``: a job at its cap gets nothing more placed."""

from __future__ import annotations

import dataclasses

import pytest

from det.master.scheduler import Request
from tests.unit.master.scheduler.factories import agent, ids, pending, run, running


def capped(r: Request, cap: int | None) -> Request:
    return dataclasses.replace(r, max_slots=cap)


@pytest.mark.parametrize("kind", ["priority", "fair_share", "round_robin"])
def test_a_job_gets_no_more_slots_than_its_cap(kind: str) -> None:
    requests = [capped(pending(f"t{i}", 1, job="exp", order=i), 2) for i in range(4)]
    d = run([agent("a", 8)], requests, kind)
    assert set(d.placements) == {"t0", "t1"}
    assert set(d.capped) == {"t2", "t3"}
    assert d.preemptions == () and d.waiting == ()


@pytest.mark.parametrize("kind", ["priority", "fair_share"])
def test_gangs_count_whole_against_the_cap(kind: str) -> None:
    requests = [capped(pending(f"t{i}", 2, job="exp", order=i), 5) for i in range(3)]
    d = run([agent("a", 8)], requests, kind)
    assert set(d.placements) == {"t0", "t1"}  # a third gang would make 6 > 5
    assert d.capped == ("t2",)


@pytest.mark.parametrize("cap", [None, 0])
def test_none_or_zero_is_no_cap(cap: int | None) -> None:
    requests = [capped(pending(f"t{i}", 1, job="exp", order=i), cap) for i in range(4)]
    d = run([agent("a", 8)], requests)
    assert set(d.placements) == {"t0", "t1", "t2", "t3"} and d.capped == ()


def test_running_work_counts_and_a_lowered_cap_stops_nothing() -> None:
    requests = [
        capped(running("r0", {"a": ids(0)}, job="exp"), 1),
        capped(running("r1", {"a": ids(1)}, job="exp"), 1),
        capped(pending("p", 1, job="exp"), 1),
    ]
    for kind in ("priority", "fair_share"):
        d = run([agent("a", 8)], requests, kind, preemption=True)
        assert d.placements == {} and d.preemptions == ()
        assert d.capped == ("p",)


def test_a_capped_job_does_not_block_lower_priorities_nor_preempt() -> None:
    requests = [
        capped(running("r", {"a": ids(0, 1)}, job="exp", priority=10), 2),
        capped(pending("more", 2, job="exp", priority=10), 2),
        running("low-run", {"a": ids(2, 3)}, job="other", priority=60),
        pending("low", 2, job="late", priority=50),
    ]
    d = run([agent("a", 6)], requests, preemption=True)
    assert set(d.placements) == {"low"}
    assert d.preemptions == () and d.waiting == ()
    assert d.capped == ("more",)


def test_an_uncapped_job_at_high_priority_still_blocks_lower_levels() -> None:
    # The control case of the test above: without the cap, "more" does not fit and blocks.
    requests = [
        running("r", {"a": ids(0, 1)}, job="exp", priority=10),
        pending("more", 6, job="exp", priority=10),
        pending("low", 2, job="late", priority=50),
    ]
    d = run([agent("a", 6)], requests)
    assert d.placements == {} and d.capped == ()


def test_fair_share_gives_the_share_a_capped_job_leaves_to_the_others() -> None:
    requests = [capped(pending(f"e{i}", 1, job="exp", order=i), 1) for i in range(4)]
    requests += [pending(f"o{i}", 1, job="other", order=10 + i) for i in range(4)]
    d = run([agent("a", 5)], requests, "fair_share")
    assert {a for a in d.placements if a.startswith("e")} == {"e0"}
    assert {a for a in d.placements if a.startswith("o")} == {"o0", "o1", "o2", "o3"}
    assert set(d.capped) == {"e1", "e2", "e3"}


def test_capped_requests_ask_the_provisioner_for_nothing() -> None:
    requests = [capped(pending(f"t{i}", 2, job="exp", order=i), 2) for i in range(3)]
    requests.append(pending("big", 4, job="other"))
    d = run([agent("a", 2)], requests)
    assert set(d.placements) == {"t0"}
    assert sorted(d.demand()) == [4]  # only the uncapped job's request
