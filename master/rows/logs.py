"""The rows of task logs."""

from __future__ import annotations

import dataclasses
import datetime as dt


@dataclasses.dataclass(frozen=True, slots=True)
class LogLine:
    """A ``task_logs`` row."""

    id: int
    task_id: str
    allocation_id: str | None
    agent_id: str | None
    container_id: str | None
    rank_id: int | None
    log: str
    level: str | None
    stdtype: str | None
    source: str | None
    timestamp: dt.datetime
