"""The state-machine tables: the moves users and loops rely on, and the ones they must not make."""

from __future__ import annotations

import pytest

from det.master import states


@pytest.mark.parametrize(
    ("entity", "current", "new", "allowed"),
    [
        ("experiment", "ACTIVE", "PAUSED", True),
        ("experiment", "PAUSED", "ACTIVE", True),
        ("experiment", "ACTIVE", "STOPPING_CANCELED", True),
        ("experiment", "STOPPING_CANCELED", "CANCELED", True),
        ("experiment", "STOPPING_CANCELED", "ACTIVE", False),
        ("experiment", "COMPLETED", "ACTIVE", False),
        ("experiment", "CANCELED", "PAUSED", False),
        ("experiment", "STOPPING_KILLED", "CANCELED", True),
        ("trial", "ACTIVE", "COMPLETED", True),
        ("trial", "PAUSED", "ACTIVE", True),
        ("trial", "COMPLETED", "ACTIVE", False),
        ("trial", "ERROR", "COMPLETED", False),
        ("allocation", "PENDING", "ASSIGNED", True),
        ("allocation", "RUNNING", "TERMINATED", True),
        ("allocation", "RUNNING", "PULLING", False),
        ("allocation", "TERMINATED", "RUNNING", False),
        ("checkpoint", "COMPLETED", "PARTIALLY_DELETED", True),
        ("checkpoint", "COMPLETED", "DELETED", True),
        ("checkpoint", "PARTIALLY_DELETED", "DELETED", True),
        ("checkpoint", "DELETED", "PARTIALLY_DELETED", False),
        ("checkpoint", "DELETED", "COMPLETED", False),
        ("instance", "running", "terminating", True),
        ("instance", "terminating", "terminated", True),
        ("instance", "terminated", "terminating", False),
        ("instance", "terminating", "running", False),
        ("continue", "COMPLETED", "ACTIVE", True),
        ("continue", "ERROR", "ACTIVE", True),
        ("continue", "PAUSED", "ACTIVE", False),
        ("continue", "DELETING", "ACTIVE", False),
    ],
)
def test_transition_table(entity: str, current: str, new: str, allowed: bool) -> None:
    assert states.can_transition(entity, current, new) is allowed


def test_terminal_states_have_no_way_back() -> None:
    for s in states.TERMINAL:
        assert not (states.TRIAL_TRANSITIONS[s] - {states.DELETING})
        assert states.EXPERIMENT_TRANSITIONS[s] <= {states.DELETING}


def test_the_guards_come_from_the_tables() -> None:
    assert states.sources("allocation", "ASSIGNED") == ["PENDING"]
    assert states.sources("checkpoint", "DELETED") == ["COMPLETED", "PARTIALLY_DELETED"]
    assert states.sources("experiment", "DELETING") == ["CANCELED", "COMPLETED", "ERROR"]
    assert "terminated" not in states.sources("instance", "terminating")


@pytest.mark.parametrize(
    ("trial_states", "expected"),
    [
        ([], None),
        (["PAUSED"], "PAUSED"),
        (["COMPLETED", "ERROR"], "COMPLETED"),
        (["COMPLETED", "ACTIVE"], "ACTIVE"),
        (["ERROR", "PAUSED", "CANCELED"], "ERROR"),
        (["STOPPING_KILLED"], None),
    ],
)
def test_an_unmanaged_experiment_follows_its_most_advanced_trial(
    trial_states: list[str], expected: str | None
) -> None:
    assert states.unmanaged_experiment_state(trial_states) == expected
