"""Notebooks on the wire: ``v1Notebook`` from a row of ``services.ntsc.get``/``list_tasks``,
and ``v1Task`` (``GetTask``: what the official CLI polls until a notebook is ready)."""

from __future__ import annotations

import datetime as dt

from det.master.rows.tasks import Task, TaskAllocation
from det.master.schemas import d
from det.master.schemas.commands import state, task_fields
from det.master.wire import ts

_TASK_TYPES: dict[str, d.v1TaskType] = {
    "COMMAND": "TASK_TYPE_COMMAND",
    "NOTEBOOK": "TASK_TYPE_NOTEBOOK",
    "SHELL": "TASK_TYPE_SHELL",
    "TENSORBOARD": "TASK_TYPE_TENSORBOARD",
    "TRIAL": "TASK_TYPE_TRIAL",
    "CHECKPOINT_GC": "TASK_TYPE_CHECKPOINT_GC",
}


def service_address(task_id: str) -> str:
    """Where the task's service is reached: the master's proxy path."""
    return f"/proxy/{task_id}/"


def notebook(r: Task) -> d.v1Notebook:
    out: d.v1Notebook = {**task_fields(r), "serviceAddress": service_address(r["id"])}  # type: ignore[typeddict-item]
    return out


def task(
    task_id: str,
    kind: str,
    created: dt.datetime,
    ended: dt.datetime | None,
    allocs: list[TaskAllocation],
    ready: bool,
) -> d.v1Task:
    """``allocs``: the task's allocations, newest first (Determined's client reads the first);
    ``ready``: whether the live one's service is up."""
    return {
        "taskId": task_id,
        "taskType": _TASK_TYPES.get(kind, "TASK_TYPE_UNSPECIFIED"),
        "startTime": ts(created) or "",
        "endTime": ts(ended),
        "allocations": [
            {
                "allocationId": a.id,
                "taskId": task_id,
                "slots": a.slots_needed,
                "state": "STATE_TERMINATED"
                if a.state == "TERMINATED"
                else state("ACTIVE", a.state),
                "isReady": ready and i == 0 and a.state == "RUNNING",
                "startTime": ts(a.started_at),
                "endTime": ts(a.ended_at),
                "exitReason": a.exit_reason,
            }
            for i, a in enumerate(allocs)
        ],
    }
