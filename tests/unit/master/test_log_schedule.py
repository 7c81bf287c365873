"""``retention_policy.schedule``: durations and five-field cron expressions (UTC)."""

from __future__ import annotations

import datetime as dt

import pytest

from det.master import log_schedule
from det.master.config import MasterConfig

UTC = dt.UTC


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_a_duration_runs_that_long_after_the_last_run() -> None:
    s = log_schedule.parse("1h30m")
    assert log_schedule.due(s, at("2026-01-01T00:00:00"), None)
    assert not log_schedule.due(s, at("2026-01-01T01:29:00"), at("2026-01-01T00:00:00"))
    assert log_schedule.due(s, at("2026-01-01T01:30:00"), at("2026-01-01T00:00:00"))


@pytest.mark.parametrize(
    ("expr", "now", "expected"),
    [
        ("0 0 * * *", "2026-03-04T00:00:30", True),
        ("0 0 * * *", "2026-03-04T00:01:00", False),
        ("*/15 2-3 * * *", "2026-03-04T03:45:00", True),
        ("*/15 2-3 * * *", "2026-03-04T04:00:00", False),
        ("30 4 1,15 * *", "2026-03-15T04:30:00", True),
        ("0 12 * * 0", "2026-03-08T12:00:00", True),  # a Sunday
        ("0 12 * * 7", "2026-03-08T12:00:00", True),  # Sunday as 7
        ("0 12 * * 1-5", "2026-03-08T12:00:00", False),
        ("0 12 13 * 5", "2026-03-13T12:00:00", True),  # both restricted: either matches
        ("0 12 1 * 5", "2026-03-13T12:00:00", True),  # a Friday, not the 1st
        ("0 12 1 * 1", "2026-03-13T12:00:00", False),
    ],
)
def test_cron_names_the_minutes_it_runs_in(expr: str, now: str, expected: bool) -> None:
    assert log_schedule.due(log_schedule.parse(expr), at(now), None) is expected


def test_a_cron_run_happens_once_in_its_minute() -> None:
    s = log_schedule.parse("0 0 * * *")
    assert not log_schedule.due(s, at("2026-03-04T00:00:40"), at("2026-03-04T00:00:10"))
    assert log_schedule.due(s, at("2026-03-05T00:00:05"), at("2026-03-04T00:00:10"))


@pytest.mark.parametrize("bad", ["", "daily", "0 0 * *", "61 * * * *", "* 24 * * *", "*/0 * * * *",
                                 "10s", "a-b * * * *"])  # fmt: skip
def test_bad_schedules_are_refused_by_the_master_config(bad: str) -> None:
    with pytest.raises(ValueError, match="schedule"):
        log_schedule.parse(bad)
    with pytest.raises(ValueError, match="schedule"):
        MasterConfig.model_validate({"retention_policy": {"schedule": bad}})


def test_retention_days_are_minus_one_to_32767() -> None:
    assert MasterConfig().retention_policy.log_retention_days == -1
    with pytest.raises(ValueError, match="log_retention_days"):
        MasterConfig.model_validate({"retention_policy": {"log_retention_days": -2}})
