"""Where gangs land: single-agent best/worst fit, whole-agent multi-agent fits, agent states,
zero-slot tasks and their cap."""

from __future__ import annotations

import pytest

from det.master.scheduler import AgentState, QueueState, Request
from det.master.scheduler.fitting import why_waiting
from tests.unit.master.scheduler.factories import agent, ids, pending, run, running


def _pool_4_2_8() -> tuple[list[AgentState], list[Request]]:
    """a: 4 free of 4; b: 2 free of 4; c: 8 free of 8."""
    agents = [agent("a", 4), agent("b", 4), agent("c", 8)]
    return agents, [running("busy", {"b": ids(0, 1)})]


@pytest.mark.parametrize(
    ("slots", "fitting", "expected"),
    [
        (1, "best", {"b": ids(2)}),
        (2, "best", {"b": ids(2, 3)}),
        (3, "best", {"a": ids(0, 1, 2)}),
        (4, "best", {"a": ids(0, 1, 2, 3)}),
        (5, "best", {"c": ids(0, 1, 2, 3, 4)}),
        (2, "worst", {"c": ids(0, 1)}),
        (4, "worst", {"c": ids(0, 1, 2, 3)}),
    ],
)
def test_gang_goes_to_the_agent_the_fitting_policy_prefers(
    slots: int, fitting: str, expected: dict[str, tuple[str, ...]]
) -> None:
    agents, placed = _pool_4_2_8()
    decision = run(agents, [*placed, pending("t", slots)], fitting=fitting)
    assert decision.placements == {"t": expected}


@pytest.mark.parametrize(
    ("agents", "placed", "slots", "expected"),
    [
        # Two idle 4-slot agents hold an 8-slot gang, all of each.
        ([agent("a", 4), agent("b", 4)], [], 8, {"a": ids(0, 1, 2, 3), "b": ids(0, 1, 2, 3)}),
        # Three idle agents: 12 slots take all three.
        (
            [agent("a", 4), agent("b", 4), agent("c", 4)],
            [],
            12,
            {"a": ids(0, 1, 2, 3), "b": ids(0, 1, 2, 3), "c": ids(0, 1, 2, 3)},
        ),
        # One agent that can hold the whole gang beats spreading it.
        ([agent("a", 4), agent("b", 4), agent("c", 8)], [], 8, {"c": ids(*range(8))}),
        # The largest idle size that divides the gang is used (fewest agents).
        (
            [*[agent(f"s{i}", 2) for i in range(4)], agent("b1", 4), agent("b2", 4)],
            [],
            8,
            {"b1": ids(0, 1, 2, 3), "b2": ids(0, 1, 2, 3)},
        ),
    ],
)
def test_gang_larger_than_any_free_agent_takes_whole_idle_agents_of_one_size(
    agents: list[AgentState],
    placed: list[Request],
    slots: int,
    expected: dict[str, tuple[str, ...]],
) -> None:
    decision = run(agents, [*placed, pending("t", slots)])
    assert decision.placements == {"t": expected}


@pytest.mark.parametrize(
    ("agents", "placed", "slots"),
    [
        # 6 free slots over two partly used agents: never part of an agent.
        ([agent("a", 4), agent("b", 4)], [running("r", {"a": ids(0), "b": ids(0)})], 6),
        # One idle 4-slot agent and one partly used: 8 cannot be split onto them.
        ([agent("a", 4), agent("b", 4)], [running("r", {"b": ids(3)})], 8),
        # 6 is not a multiple of the idle agents' size.
        ([agent("a", 4), agent("b", 4)], [], 6),
        # Idle agents of different sizes are not mixed: 4 + 2 does not hold 6.
        ([agent("a", 4), agent("b", 2)], [], 6),
        # Three free slots do not hold a 4-slot gang.
        ([agent("a", 4)], [running("r", {"a": ids(0)})], 4),
    ],
)
def test_gang_gets_all_its_slots_or_none(
    agents: list[AgentState], placed: list[Request], slots: int
) -> None:
    decision = run(agents, [*placed, pending("t", slots)])
    assert decision.placements == {}
    assert {e.allocation_id: e.state for e in decision.queue}["t"] == QueueState.QUEUED


def test_two_slot_gang_spans_two_idle_one_slot_agents() -> None:
    decision = run([agent("a", 1), agent("b", 1)], [pending("t", 2)])
    assert decision.placements == {"t": {"a": ids(0), "b": ids(0)}}


@pytest.mark.parametrize(
    ("agents", "expected_agent"),
    [
        ([agent("a", 4, draining=True), agent("b", 4)], "b"),
        ([agent("a", 4, enabled=False), agent("b", 4)], "b"),
        ([agent("a", 4, draining=True)], None),
        ([agent("a", 4, enabled=False)], None),
    ],
)
def test_disabled_and_draining_agents_get_no_new_work(
    agents: list[AgentState], expected_agent: str | None
) -> None:
    decision = run(agents, [pending("t", 2), pending("z", 0)])
    placed_on = {a for p in decision.placements.values() for a in p}
    assert placed_on == ({expected_agent} if expected_agent else set())


def test_work_on_a_draining_agent_keeps_running_and_its_slots_stay_used() -> None:
    agents = [agent("a", 4, draining=True), agent("b", 4)]
    decision = run(agents, [running("r", {"a": ids(0, 1)}), pending("t", 4)])
    assert decision.placements == {"t": {"b": ids(0, 1, 2, 3)}}
    assert decision.preemptions == ()


def test_placed_requests_are_never_moved_and_their_slots_are_not_reused() -> None:
    agents = [agent("a", 4), agent("b", 4)]
    placed = running("r", {"a": ids(0, 2)})
    decision = run(agents, [placed, pending("t", 2)])
    assert "r" not in decision.placements
    # Best fit puts the gang on the agent with 2 free slots: the ones r does not use.
    assert decision.placements == {"t": {"a": ids(1, 3)}}


def test_requests_placed_in_one_pass_do_not_share_slots() -> None:
    decision = run([agent("a", 4)], [pending(f"t{i}", 1) for i in range(5)])
    assert decision.placements == {f"t{i}": {"a": ids(i)} for i in range(4)}


@pytest.mark.parametrize(
    ("aux", "max_aux", "expected"),
    [
        ({"a": 2, "b": 0, "c": 1}, 100, "b"),
        ({"a": 0, "b": 1, "c": 1}, 100, "a"),
        ({"a": 3, "b": 3, "c": 2}, 3, "c"),  # the zero-slot agent c hosts it
        ({"a": 3, "b": 3, "c": 3}, 3, None),  # every agent at the cap
    ],
)
def test_zero_slot_task_goes_to_the_agent_with_fewest_aux_containers_under_the_cap(
    aux: dict[str, int], max_aux: int, expected: str | None
) -> None:
    agents = [agent("a", 4), agent("b", 4), agent("c", 0)]
    placed = [running(f"{a}-aux{i}", {a: ()}) for a, n in aux.items() for i in range(n)]
    decision = run(agents, [*placed, pending("z", 0)], max_aux=max_aux)
    assert decision.placements == ({"z": {expected: ()}} if expected else {})


def test_zero_slot_tasks_spread_over_agents_and_stop_at_the_cap() -> None:
    agents = [agent("a", 4), agent("b", 0)]
    decision = run(agents, [pending(f"z{i}", 0) for i in range(5)], max_aux=2)
    assert sorted(next(iter(p)) for p in decision.placements.values()) == ["a", "a", "b", "b"]
    assert [e.state for e in decision.queue].count(QueueState.QUEUED) == 1


def test_zero_slot_tasks_are_not_held_up_by_a_pending_gang() -> None:
    agents = [agent("a", 4)]
    decision = run(agents, [pending("big", 16, priority=1), pending("z", 0, priority=80)])
    assert decision.placements == {"z": {"a": ()}}


def test_aux_containers_do_not_take_slots() -> None:
    agents = [agent("a", 2)]
    decision = run(agents, [running("z", {"a": ()}), pending("t", 2)])
    assert decision.placements == {"t": {"a": ids(0, 1)}}


# -- why a gang waits -------------------------------------------------------------------------


def test_why_a_gang_waits_names_what_it_needs_and_what_is_free() -> None:
    two_by_two = [agent("a", 2), agent("b", 2)]
    one_each = [running("x", {"a": ids(0)}), running("y", {"b": ids(0)})]
    # 4 slots on two 2-slot agents, each with one slot taken: 1+1 free, no idle agent.
    assert why_waiting(two_by_two, one_each, 4) == (
        "needs 4 slots on 2 idle agents of 2 slots; 0 such agents idle, free now: 1+1"
    )
    # 2 slots on one agent, while each has one free.
    assert why_waiting(two_by_two, one_each, 2) == "needs 2 slots on one agent; free now: 1+1"
    # A size that divides nothing: 3 slots over 2-slot agents.
    assert why_waiting(two_by_two, [], 3) == (
        "needs 3 slots on whole idle agents of one size that divides 3; no agent here has such"
        " a size (free now: 2+2)"
    )
    # All taken.
    full = [running("x", {"a": ids(0, 1)}), running("y", {"b": ids(0, 1)})]
    assert why_waiting(two_by_two, full, 1) == "needs 1 slot on one agent; no slot is free now"
    # It fits now: it waits for its turn, not for room; a drained agent offers nothing.
    assert why_waiting(two_by_two, [], 4) is None
    assert why_waiting([], [], 1) == (
        "no agent can take work now (none connected, or all disabled or draining)"
    )
    drained = [agent("a", 2), agent("b", 2, draining=True)]
    assert why_waiting(drained, [], 4) == (
        "needs 4 slots on 2 idle agents of 2 slots; 1 such agent idle, free now: 2"
    )
