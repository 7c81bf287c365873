"""``can_ever_fit``: jobs that could never be placed are refused at creation, with the reason."""

from __future__ import annotations

import pytest

from det.master.scheduler import AgentState, can_ever_fit


def _times(text: str) -> str:
    """The messages use the multiplication sign; the tests write " x " for it."""
    return text.replace(" x ", " \u00d7 ")


@pytest.mark.parametrize(
    ("slots", "agents", "growth"),
    [
        (0, [4], None),
        (1, [4], None),
        (4, [4, 4], None),
        (8, [4, 4], None),  # two whole agents
        (12, [4, 4, 4], None),
        (8, [8, 1], None),
        (6, [8], None),
        (16, [4, 4], (4, 4)),  # the pool can grow to four 4-slot instances
        (16, [], (2, 8)),
        (8, [], (1, 8)),
        (0, [0], None),  # zero-slot tasks fit an agent without slots
        (1, [], None),  # no agents and no provider: agents may still register
        (0, [], (0, 4)),
    ],
)
def test_requests_the_pool_can_hold_are_accepted(
    slots: int, agents: list[int], growth: tuple[int, int] | None
) -> None:
    assert can_ever_fit(slots, agents, growth) is None


@pytest.mark.parametrize(
    ("slots", "agents", "growth", "message"),
    [
        (
            16,
            [4, 4],
            None,
            "needs 16 slots; the largest the pool can offer is 8 (2 agents x 4 slots)",
        ),
        (
            9,
            [8],
            None,
            "needs 9 slots; the largest the pool can offer is 8 (one agent with 8 slots)",
        ),
        (
            2,
            [1],
            None,
            "needs 2 slots; the largest the pool can offer is 1 (one agent with 1 slot)",
        ),
        (
            32,
            [],
            (2, 8),
            "needs 32 slots; the largest the pool can offer when grown to its maximum is 16"
            " (2 agents x 8 slots)",
        ),
        (
            6,
            [4, 4, 4],
            None,
            "needs 6 slots, more than any single agent has (4); across agents a trial uses whole"
            " agents of one size, so it must be a multiple of 4 (the pool has 3 agents x 4 slots)",
        ),
        (
            1,
            [0, 0],
            None,
            "needs 1 slot; the pool has 2 agents x 0 slots, with no slots",
        ),
        (
            2,
            [],
            (0, 4),
            "needs 2 slots; the pool has no agents and can grow to 0 instances x 4 slots,"
            " with no slots",
        ),
        (-1, [4], None, "needs -1 slots; a slot count cannot be negative"),
    ],
)
def test_requests_the_pool_can_never_hold_are_refused_with_the_reason(
    slots: int, agents: list[int], growth: tuple[int, int] | None, message: str
) -> None:
    assert can_ever_fit(slots, agents, growth) == _times(message)


def test_agent_states_are_accepted_instead_of_slot_counts() -> None:
    agents = [AgentState.with_slots("a", 4), AgentState.with_slots("b", 4)]
    assert can_ever_fit(8, agents) is None
    assert can_ever_fit(16, agents) == _times(
        "needs 16 slots; the largest the pool can offer is 8 (2 agents x 4 slots)"
    )


def test_growth_counts_existing_instances_once() -> None:
    # Two 4-slot agents that are the provider's own instances, max_instances 2: no more room.
    assert can_ever_fit(12, [4, 4], (2, 4)) is not None
    assert can_ever_fit(12, [4, 4], (3, 4)) is None
