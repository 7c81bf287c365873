"""The cluster message's input rules (det.master.services.cluster_messages): durations, RFC 3339
times and the one-line errors naming the field."""

from __future__ import annotations

import datetime as dt

import pytest

from det.master.errors import InvalidArgument
from det.master.services import cluster_messages as cm
from det.master.services import master_settings

NOW = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("24h", 86400),
        ("90m", 5400),
        ("1h30m", 5400),
        ("5d", 432000),
        ("2w", 1209600),
        ("1.5s", 1.5),
    ],
)
def test_durations_in_go_units_with_days_and_weeks(text: str, seconds: float) -> None:
    assert cm.parse_duration(text) == dt.timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "soon", "5", "h", "1h x", "0s", "-1h"])
def test_bad_durations_name_the_field(text: str) -> None:
    with pytest.raises(InvalidArgument, match=r"^duration: must be"):
        cm.parse_duration(text)


def test_protobuf_times_with_nanoseconds_and_naive_ones_parse_as_utc() -> None:
    t = cm.parse_time("startTime", "2026-10-26T23:17:12.123456789Z")
    assert t == dt.datetime(2026, 10, 26, 23, 17, 12, 123456, tzinfo=dt.UTC)
    assert cm.parse_time("endTime", "2026-10-26T23:17:12").tzinfo == dt.UTC


def test_validate_defaults_the_start_to_now_and_adds_the_duration() -> None:
    text, start, end = cm.validate("hi", None, None, "2h", NOW)
    assert (text, start, end) == ("hi", NOW, NOW + dt.timedelta(hours=2))
    assert cm.validate("hi", None, None, None, NOW)[2] is None


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("x" * 251, None, None, None), "message: must be at most 250 characters (got 251)"),
        (("", None, None, None), "message: must not be empty"),
        (("a", None, "2026-11-26T11:00:00Z", None), "endTime: must be after startTime"),
        (("a", None, "2026-11-27T00:00:00Z", "1h"), "endTime: give endTime or duration"),
        (("a", "2026-11-26T10:00:00Z", "2026-11-26T11:00:00Z", None), "endTime: must be in"),
        (("a", "yesterday", None, None), "startTime: must be an RFC 3339 timestamp"),
    ],
)
def test_bad_input_is_one_line_naming_the_field(args: tuple[str, ...], error: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        cm.validate(*args, NOW)  # type: ignore[arg-type]
    assert str(e.value).startswith(error) and "\n" not in str(e.value)


def test_master_yaml_level_names_map_to_logging_levels() -> None:
    import logging

    assert master_settings.python_level("trace") == logging.DEBUG
    assert master_settings.python_level("warn") == logging.WARNING
    assert master_settings.python_level("fatal") == logging.CRITICAL
    assert set(master_settings.WIRE_LEVELS) == {
        "LOG_LEVEL_" + x for x in ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
    }
