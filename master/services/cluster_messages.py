"""The cluster-wide message: at most one, set and cleared by admins, read by everyone while it
is active (its start has passed and its end, if any, has not)."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from det.master import db
from det.master.db import Conn
from det.master.errors import InvalidArgument

# Determined keeps messages short (a banner line); so does det.
MAX_LENGTH = 250

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 7 * 86400.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h|d|w)")
_FRACTION = re.compile(r"(\.\d{6})\d+")


@dataclass(frozen=True)
class ClusterMessage:
    message: str
    start_time: dt.datetime
    end_time: dt.datetime | None
    created_time: dt.datetime


def parse_time(field: str, raw: str) -> dt.datetime:
    """An RFC 3339 timestamp (as protobuf writes them: nanoseconds allowed); a naive one is UTC."""
    text = _FRACTION.sub(r"\1", raw.strip()).replace("Z", "+00:00").replace("z", "+00:00")
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(
            f"{field}: must be an RFC 3339 timestamp such as 2026-10-26T23:17:12Z (got {raw!r})"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def parse_duration(raw: str) -> dt.timedelta:
    """A Go duration (``1h30m``, ``90s``) with days and weeks too (``5d``, ``2w``), as
    Determined's CLI documents for ``--duration``; it must be positive."""
    text = raw.strip()
    pos, seconds = 0, 0.0
    for m in _PART.finditer(text):
        if m.start() != pos:
            break
        seconds += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not text or pos != len(text):
        raise InvalidArgument(
            f"duration: must be a duration such as 24h, 90m, 5d or 2w (got {raw!r})"
        )
    if seconds <= 0:
        raise InvalidArgument(f"duration: must be positive (got {raw!r})")
    return dt.timedelta(seconds=seconds)


def validate(
    message: str | None,
    start: str | None,
    end: str | None,
    duration: str | None,
    now: dt.datetime,
) -> tuple[str, dt.datetime, dt.datetime | None]:
    """The message, its start and its end from a SetClusterMessage request, or one
    InvalidArgument naming the field and the rule."""
    if message is None or not message.strip():
        raise InvalidArgument("message: must not be empty")
    if len(message) > MAX_LENGTH:
        raise InvalidArgument(
            f"message: must be at most {MAX_LENGTH} characters (got {len(message)})"
        )
    if end and duration:
        raise InvalidArgument("endTime: give endTime or duration, not both")
    start_time = parse_time("startTime", start) if start else now
    end_time: dt.datetime | None = None
    if end:
        end_time = parse_time("endTime", end)
        if end_time <= start_time:
            raise InvalidArgument(
                f"endTime: must be after startTime ({end_time.isoformat()} is not after "
                f"{start_time.isoformat()})"
            )
    elif duration:
        end_time = start_time + parse_duration(duration)
    if end_time is not None and end_time <= now:
        raise InvalidArgument(f"endTime: must be in the future (got {end_time.isoformat()})")
    return message, start_time, end_time


def set_message(
    conn: Conn, message: str, start: dt.datetime, end: dt.datetime | None
) -> ClusterMessage:
    """Replaces the cluster message (there is at most one)."""
    row = db.fetch_row(
        conn,
        ClusterMessage,
        "INSERT INTO cluster_message (singleton, message, start_time, end_time) "
        "VALUES (true, %s, %s, %s) ON CONFLICT (singleton) DO UPDATE SET "
        "message = EXCLUDED.message, start_time = EXCLUDED.start_time, "
        "end_time = EXCLUDED.end_time, created_time = now() "
        "RETURNING message, start_time, end_time, created_time",
        (message, start, end),
    )
    assert row is not None
    return row


def clear(conn: Conn) -> None:
    conn.execute("DELETE FROM cluster_message")


def active(conn: Conn) -> ClusterMessage | None:
    """The message shown now, if any (an expired or not yet started one is not)."""
    return db.fetch_row(
        conn,
        ClusterMessage,
        "SELECT message, start_time, end_time, created_time FROM cluster_message "
        "WHERE start_time <= now() AND (end_time IS NULL OR end_time > now())",
    )
