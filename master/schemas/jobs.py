"""Jobs and resource pools on the wire: ``v1Job`` (with det's ``pendingReason``) from a row of
``services.jobs.list_jobs`` (``rows.jobs.Job``), and ``v1ResourcePool`` from a pool's config
and live counts."""

from __future__ import annotations

from typing import NotRequired

from typing_extensions import TypedDict

from det.master.rows.jobs import Job as JobRow
from det.master.schemas import d
from det.master.wire import ts

_QUEUE_STATE: dict[str, d.jobv1State] = {
    "QUEUED": "STATE_QUEUED",
    "SCHEDULED": "STATE_SCHEDULED",
    "SCHEDULED_BACKFILLED": "STATE_SCHEDULED_BACKFILLED",
}


# jobs.kind → Determined's job type (interactive tasks are jobs of their own).
_TYPES: dict[str, d.jobv1Type] = {
    "EXPERIMENT": "TYPE_EXPERIMENT",
    "COMMAND": "TYPE_COMMAND",
    "NOTEBOOK": "TYPE_NOTEBOOK",
    "SHELL": "TYPE_SHELL",
    "TENSORBOARD": "TYPE_TENSORBOARD",
    # an ended experiment's job while its checkpoint GC task waits or runs (services.jobs)
    "CHECKPOINT_GC": "TYPE_CHECKPOINT_GC",
}


class Job(d.v1Job, total=False):
    """``v1Job`` with det's addition (ignored by Determined's client): why a queued job is
    still waiting."""

    pendingReason: str | None


class RBACJob(TypedDict):
    full: NotRequired[Job | None]
    limited: NotRequired[d.v1LimitedJob | None]


class GetJobsResponse(TypedDict):
    jobs: list[Job]
    pagination: d.v1Pagination


class GetJobsV2Response(TypedDict):
    jobs: list[RBACJob]
    pagination: d.v1Pagination


def queue_state(state: str) -> d.jobv1State:
    return _QUEUE_STATE.get(state, "STATE_UNSPECIFIED")


def job(r: JobRow) -> Job:
    """``r`` is a row of ``services.jobs.list_jobs``."""
    return {
        "jobId": r["id"],
        "type": _TYPES.get(r.get("kind") or "", "TYPE_EXPERIMENT"),
        "entityId": str(r["experiment_id"] if r["experiment_id"] is not None else r["ntsc_id"]),
        "name": r["name"],
        "username": r["username"],
        "userId": r["owner_id"],
        "resourcePool": r["resource_pool"],
        "submissionTime": ts(r["submitted_at"]) or "",
        "isPreemptible": True,
        "priority": r["priority"],
        "weight": r["weight"],
        "allocatedSlots": int(r["allocated"]),
        "requestedSlots": int(r["requested"]),
        "progress": r["progress"],
        "workspaceId": int(r.get("workspace_id") or 1),
        "summary": {"state": queue_state(r["queue_state"]), "jobsAhead": r["jobs_ahead"]},
        "pendingReason": r.get("pending_reason"),
    }
