"""Days left before a task's logs expire, as Determined's GetTrialRemainingLogRetentionDays
counts them (whole days, floored; 0 once past; -1 forever; None while the task runs)."""

from __future__ import annotations

import datetime as dt

import pytest

from det.master.services.log_retention import remaining

NOW = dt.datetime(2026, 11, 28, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("ended_days_ago", "days", "expected"),
    [
        # Determined's own table (10 days; ended 15, 10, 5 and 0 days ago).
        (15, 10, 0),
        (10, 10, 0),
        (5, 10, 4),
        (0, 10, 9),
        (0, 100, 99),
        (0.5, 1, 0),
        (0, 0, 0),
        (3, -1, -1),
        (None, -1, -1),
        (None, 30, None),
    ],
)
def test_remaining_days(ended_days_ago: float | None, days: int, expected: int | None) -> None:
    # A moment after the end, as a real request comes after it.
    ended = (
        None
        if ended_days_ago is None
        else NOW - dt.timedelta(days=ended_days_ago) - dt.timedelta(seconds=1)
    )
    assert remaining(ended, days, NOW) == expected
