"""The rows of interactive tasks (commands, notebooks, shells, TensorBoards)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from typing_extensions import TypedDict

from det.common.jsontypes import JSONObject
from det.master.expconf.task import TaskKind


class TensorBoardSource(TypedDict):
    """A trial a TensorBoard serves, and where its files are (its experiment's storage)."""

    experimentId: int
    trialId: int
    #: The experiment's ``checkpoint_storage`` as stored.
    storage: JSONObject


class TaskData(TypedDict, total=False):
    """``ntsc_tasks.data``: what a kind keeps of its own (``{}`` for the others)."""

    #: A shell's key pair (:func:`key_pair`).
    publicKey: str
    privateKey: str
    #: A TensorBoard's experiments and trials as asked, and its sources
    #: (``services.tensorboards.resolve``).
    experimentIds: list[int]
    trialIds: list[int]
    sources: list[TensorBoardSource]


class Task(TypedDict):
    """A task as it is shown (``schemas.commands``, ``notebooks``, ``shells``,
    ``tensorboards``): its ``ntsc_tasks`` row, its owner's name, its pool and its latest
    allocation (the live one, if any; None for each of its columns before the first)."""

    id: str
    kind: TaskKind
    owner_id: int
    workspace_id: int
    job_id: str
    description: str
    #: The resolved config (:func:`resolve_config`), as stored.
    config: JSONObject
    context: bytes | None
    data: TaskData
    state: str
    run_id: int
    exit_code: int | None
    exit_status: str | None
    proxy_address: str | None
    last_activity: dt.datetime
    created_at: dt.datetime
    ended_at: dt.datetime | None
    username: str
    resource_pool: str
    allocation_id: str | None
    alloc_state: str | None
    container_id: str | None
    placement: dict[str, list[str]] | None
    alloc_started_at: dt.datetime | None


@dataclass(frozen=True, slots=True)
class TaskAllocation:
    """One of a task's allocations as ``GetTask`` shows it (``schemas.notebooks.task``)."""

    id: str
    slots_needed: int
    state: str
    created_at: dt.datetime
    started_at: dt.datetime | None
    ended_at: dt.datetime | None
    exit_reason: str | None


@dataclass(frozen=True, slots=True)
class AllocationSummaryRow:
    """A live allocation as ``GetTasks`` shows it (``schemas.tasks.allocation_summary``): its
    columns, what it runs (a trial of an experiment, a checkpoint GC of one, or an interactive
    task with its description) and its job's priority."""

    id: str
    task_id: str
    resource_pool: str
    slots_needed: int
    #: ``{agent id: [slot ids]}`` once placed.
    placement: dict[str, list[str]] | None
    container_id: str | None
    created_at: dt.datetime
    started_at: dt.datetime | None
    trial_id: int | None
    experiment_id: int | None
    gc_experiment_id: int | None
    ntsc_description: str | None
    priority: int | None
