"""When the log retention cleanup runs (``retention_policy.schedule``): pure, ``now`` passed in.

A schedule is a duration (``24h``, ``30m``, ``1h30m``, ``3600s``: runs that long after the last
run) or a five-field cron expression in UTC (minute, hour, day of month, month, day of week;
each ``*``, ``N``, ``N-M``, a ``/step`` of either, or a comma list; Sunday is 0 or 7; when both
the day of month and the day of week are restricted, either one matching is enough, as in cron):
a run is due in a minute the expression names, once.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_NAMES = ("minute", "hour", "day of month", "month", "day of week")


@dataclass(frozen=True)
class Schedule:
    every: dt.timedelta | None  # a duration schedule
    fields: tuple[frozenset[int], ...] = ()  # a cron schedule: the values each field allows


def _field(text: str, index: int) -> frozenset[int]:
    lo, hi = _RANGES[index]
    out: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        step = int(step_text) if step_text.isdigit() and int(step_text) > 0 else None
        if step_text and step is None:
            raise ValueError(f"schedule: {_NAMES[index]} step {step_text!r} is not a number > 0")
        if body == "*":
            start, end = lo, hi
        elif re.fullmatch(r"\d+-\d+", body):
            start, end = (int(x) for x in body.split("-"))
        elif body.isdigit():
            start = end = int(body)
            if step is not None:
                end = hi
        else:
            raise ValueError(f"schedule: {_NAMES[index]} {part!r} is not *, N, N-M or a list")
        if not lo <= start <= end <= hi:
            raise ValueError(f"schedule: {_NAMES[index]} {part!r} is outside {lo}-{hi}")
        out.update(range(start, end + 1, step or 1))
    if index == 4 and 7 in out:
        out = (out - {7}) | {0}
    return frozenset(out)


def parse(text: str) -> Schedule:
    """The schedule ``text`` names, or ValueError saying what a schedule is."""
    text = text.strip()
    m = _DURATION.fullmatch(text)
    if text and m is not None and any(m.groups()):
        h, mi, s = (int(g or 0) for g in m.groups())
        every = dt.timedelta(hours=h, minutes=mi, seconds=s)
        if every < dt.timedelta(minutes=1):
            raise ValueError("schedule: a duration of at least 1m")
        return Schedule(every)
    parts = text.split()
    if len(parts) != 5:
        raise ValueError(
            f"schedule: {text!r} is neither a duration (24h, 30m) nor a five-field cron"
            " expression (0 0 * * *)"
        )
    return Schedule(None, tuple(_field(p, i) for i, p in enumerate(parts)))


def due(schedule: Schedule, now: dt.datetime, last_run: dt.datetime | None) -> bool:
    """Whether a run is due at ``now`` (UTC) after one at ``last_run`` (None: never ran)."""
    if schedule.every is not None:
        return last_run is None or now - last_run >= schedule.every
    minute = now.replace(second=0, microsecond=0)
    if last_run is not None and last_run >= minute:
        return False
    mi, h, dom, mon, dow = schedule.fields
    weekday = (now.weekday() + 1) % 7  # cron: Sunday is 0
    day_ok, weekday_ok = now.day in dom, weekday in dow
    both = len(dom) < 31 and len(dow) < 7  # both restricted: either one, as cron has it
    day = (day_ok or weekday_ok) if both else (day_ok and weekday_ok)
    return now.minute in mi and now.hour in h and now.month in mon and day
