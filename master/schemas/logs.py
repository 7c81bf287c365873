"""Task and trial log lines on the wire: ``v1TaskLogsResponse`` and ``v1TrialLogsResponse`` from
``task_logs`` rows."""

from __future__ import annotations

from typing import get_args

from det.master.rows.logs import LogLine
from det.master.schemas import d
from det.master.wire import ts

LEVELS: tuple[d.v1LogLevel, ...] = get_args(d.v1LogLevel)

# Python's level names (what det's harness and agent store) as Determined's.
PYTHON_LEVELS: dict[str, d.v1LogLevel] = {
    "trace": "LOG_LEVEL_TRACE",
    "debug": "LOG_LEVEL_DEBUG",
    "info": "LOG_LEVEL_INFO",
    "warn": "LOG_LEVEL_WARNING",
    "warning": "LOG_LEVEL_WARNING",
    "error": "LOG_LEVEL_ERROR",
    "critical": "LOG_LEVEL_CRITICAL",
    "fatal": "LOG_LEVEL_CRITICAL",
}


def level(stored: str | None) -> d.v1LogLevel:
    """A stored level as one of Determined's: none is INFO; a name its clients do not know
    (they parse the enum strictly) is UNSPECIFIED."""
    if not stored:
        return "LOG_LEVEL_INFO"
    if stored in LEVELS:
        return stored
    return PYTHON_LEVELS.get(stored.lower(), "LOG_LEVEL_UNSPECIFIED")


def task_log(r: LogLine) -> d.v1TaskLogsResponse:
    return {
        "id": str(r.id),
        "taskId": r.task_id,
        "allocationId": r.allocation_id,
        "agentId": r.agent_id,
        "containerId": r.container_id,
        "rankId": r.rank_id,
        "timestamp": ts(r.timestamp) or "",
        "level": level(r.level),
        "log": r.log,
        "message": r.log,
        "source": r.source,
        "stdtype": r.stdtype,
    }


def trial_log(r: LogLine, trial_id: int) -> d.v1TrialLogsResponse:
    return {
        "id": str(r.id),
        "trialId": trial_id,
        "agentId": r.agent_id,
        "containerId": r.container_id,
        "rankId": r.rank_id,
        "timestamp": ts(r.timestamp) or "",
        "level": level(r.level),
        "log": r.log,
        "message": r.log,
        "source": r.source,
        "stdtype": r.stdtype,
    }
