"""The job queue the pass reports: order, states and Determined's ``jobsAhead``."""

from __future__ import annotations

from det.master.scheduler import JobSummary, QueueEntry, QueueState
from tests.unit.master.scheduler.factories import agent, ids, pending, run, running

Q, S = QueueState.QUEUED, QueueState.SCHEDULED


def test_queue_follows_priority_order_and_counts_jobs_ahead() -> None:
    agents = [agent("a", 4), agent("b", 4)]
    requests = [
        pending("D1", 0, job="D", priority=42, order=5),
        pending("C1", 1, job="C", priority=42, order=4),
        running("A1", {"a": ids(0, 1, 2, 3)}, job="A", priority=42, order=1),
        pending("B2", 4, job="B", priority=10, order=3),
        pending("B1", 4, job="B", priority=10, order=2),
    ]
    decision = run(agents, requests)
    assert decision.placements == {"B1": {"b": ids(0, 1, 2, 3)}, "D1": {"a": ()}}
    assert decision.queue == (
        QueueEntry("B1", "B", 4, S, 0),
        QueueEntry("B2", "B", 4, Q, 0),
        QueueEntry("A1", "A", 4, S, 1),
        # C waits behind B's pending trial (a higher priority); D is a zero-slot task.
        QueueEntry("C1", "C", 1, Q, 2),
        QueueEntry("D1", "D", 0, S, 3),
    )
    assert decision.jobs == (
        JobSummary("B", S, 0, 8, 4),
        JobSummary("A", S, 1, 4, 4),
        JobSummary("C", Q, 2, 1, 0),
        JobSummary("D", S, 3, 0, 0),
    )


def test_states_render_as_determined_wire_strings() -> None:
    decision = run([agent("a", 1)], [pending("t1", 1), pending("t2", 1)])
    assert ["STATE_" + e.state for e in decision.queue] == ["STATE_SCHEDULED", "STATE_QUEUED"]


def test_jobs_ahead_counts_distinct_jobs_not_requests() -> None:
    requests = (
        [pending(f"A{i}", 1, job="A", priority=5) for i in range(3)]
        + [pending(f"B{i}", 1, job="B", priority=7) for i in range(3)]
        + [pending("C0", 1, job="C", priority=9)]
    )
    decision = run([agent("a", 1)], requests)
    assert [(j.job_id, j.jobs_ahead) for j in decision.jobs] == [("A", 0), ("B", 1), ("C", 2)]
    assert {e.jobs_ahead for e in decision.queue if e.job_id == "B"} == {1}


def test_every_request_appears_once_in_the_queue() -> None:
    requests = [
        running("r", {"a": ids(0)}, priority=80),
        pending("p", 2, priority=1),
        pending("z", 0),
        pending("never", 64),
    ]
    decision = run([agent("a", 2)], requests, preemption=True)
    assert sorted(e.allocation_id for e in decision.queue) == ["never", "p", "r", "z"]
    # r is being preempted for p but still runs: it stays SCHEDULED.
    assert decision.preemptions == ("r",)
    assert {e.allocation_id: e.state for e in decision.queue}["r"] == S


def test_fair_share_queue_follows_grant_order_and_puts_unplaceable_work_last() -> None:
    requests = [
        pending("X", 16, job="X", order=0),  # more than the pool could ever hold
        pending("A1", 1, job="A", order=1),
        pending("B1", 1, job="B", order=2),
        pending("A2", 1, job="A", order=3),
    ]
    decision = run([agent("a", 4)], requests, "fair_share")
    assert [e.allocation_id for e in decision.queue] == ["A1", "B1", "A2", "X"]
    assert [(j.job_id, j.jobs_ahead, j.state) for j in decision.jobs] == [
        ("A", 0, S),
        ("B", 1, S),
        ("X", 2, Q),
    ]


def test_decision_reports_slot_counts() -> None:
    decision = run([agent("a", 2), agent("b", 2)], [pending("t", 4)])
    assert decision.slot_counts() == {"t": {"a": 2, "b": 2}}


def test_demand_is_what_stays_queued_without_waiting_for_preempted_work() -> None:
    requests = [
        running("victim", {"a": ids(0, 1)}, priority=90),
        pending("h", 2, priority=10),  # waits for the victim's slots
        pending("big", 8, priority=20),  # needs a new machine
        pending("z", 0, priority=30),  # placed
        pending("t", 1, priority=40),  # blocked behind big, no preemption possible
    ]
    decision = run([agent("a", 2)], requests, preemption=True)
    assert decision.waiting == ("h",)
    assert decision.demand() == (8, 1)
