"""The rows of the job queue."""

from __future__ import annotations

import datetime as dt

from typing_extensions import TypedDict


class ListedJob(TypedDict):
    """A ``jobs`` row with what its listing shows of its experiment or task and its slots."""

    id: str
    kind: str
    experiment_id: int | None
    owner_id: int
    resource_pool: str
    priority: int
    weight: float
    queue_key: float
    submitted_at: dt.datetime
    #: The experiment's name or the task's description (a job is one or the other).
    name: str
    exp_state: str | None
    progress: float | None
    username: str
    ntsc_id: str | None
    workspace_id: int | None
    allocated: int
    requested: int


class Job(ListedJob):
    """A listed job (``schemas.jobs.job``): its row and its place in the queue."""

    pending_reason: str | None
    queue_state: str
    jobs_ahead: int
    position: int
