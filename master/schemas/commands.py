"""Commands on the wire: ``v1Command`` (with det's ``exitCode``) from a row of
``services.ntsc.get``/``list_tasks``, and the parts every interactive task's message shares."""

from __future__ import annotations

from typing_extensions import TypedDict

from det.common.jsontypes import JSONObject
from det.master.expconf import redact
from det.master.rows.tasks import Task
from det.master.schemas import d
from det.master.wire import ts

# A live allocation's state → the task's wire state. An active task whose last allocation has
# ended is waiting for its next one (it was preempted): QUEUED.
_STATES: dict[str, d.taskv1State] = {
    "PENDING": "STATE_QUEUED",
    "ASSIGNED": "STATE_PULLING",
    "PULLING": "STATE_PULLING",
    "STARTING": "STATE_STARTING",
    "RUNNING": "STATE_RUNNING",
    "TERMINATING": "STATE_TERMINATING",
    "TERMINATED": "STATE_QUEUED",
}
_CONTAINER_STATES: dict[str, d.containerv1State] = {
    "ASSIGNED": "STATE_ASSIGNED",
    "PULLING": "STATE_PULLING",
    "STARTING": "STATE_STARTING",
    "RUNNING": "STATE_RUNNING",
    "TERMINATING": "STATE_RUNNING",
    "TERMINATED": "STATE_TERMINATED",
}


class TaskFields(TypedDict):
    """What ``v1Command``, ``v1Notebook``, ``v1Shell`` and ``v1Tensorboard`` share."""

    id: str
    description: str
    jobId: str
    resourcePool: str
    startTime: str
    state: d.taskv1State
    username: str
    userId: int
    displayName: str
    workspaceId: int
    exitStatus: str | None
    container: d.v1Container | None


class Command(d.v1Command, total=False):
    """``v1Command`` with det's addition (ignored by Determined's client): the exit code of
    the command once it has ended (``null`` while it runs, or when it never started)."""

    exitCode: int | None


class GetCommandsResponse(TypedDict):
    commands: list[Command]
    pagination: d.v1Pagination


class CommandResponse(TypedDict):
    """``v1LaunchCommandResponse`` / ``v1GetCommandResponse``."""

    command: Command
    config: JSONObject


def state(task_state: str, alloc_state: str | None) -> d.taskv1State:
    """A task's wire state from its own and its latest allocation's (None: none yet)."""
    if task_state == "TERMINATED":
        return "STATE_TERMINATED"
    return _STATES.get(alloc_state or "PENDING", "STATE_QUEUED")


def task_fields(r: Task) -> TaskFields:
    container: d.v1Container | None = None
    if r["container_id"] and r["alloc_state"] in _CONTAINER_STATES:
        container = {"id": r["container_id"], "state": _CONTAINER_STATES[r["alloc_state"]]}
    return {
        "id": r["id"],
        "description": r["description"],
        "jobId": r["job_id"],
        "resourcePool": r["resource_pool"],
        "startTime": ts(r["created_at"]) or "",
        "state": state(r["state"], r["alloc_state"]),
        "username": r["username"],
        "userId": r["owner_id"],
        "displayName": r["username"],
        "workspaceId": r["workspace_id"],
        "exitStatus": r["exit_status"] if r["state"] == "TERMINATED" else None,
        "container": container,
    }


def config(r: Task) -> JSONObject:
    """The task's config as shown (registry secrets hidden)."""
    return redact(r["config"])


def command(r: Task) -> Command:
    out: Command = {**task_fields(r), "exitCode": r["exit_code"]}  # type: ignore[typeddict-item]
    return out
