"""Who owns what: the rows ``api/_access.py`` applies its one ownership rule to.

Each function returns the owner's id and username (``owner_id``, ``username``) of one resource,
or None when the resource does not exist; none of them writes. A default workspace, project or
template has an ``owner_id`` of None (it is for admins).
"""

from __future__ import annotations

import dataclasses

from psycopg.rows import class_row

from det.master import db
from det.master.db import Conn


@dataclasses.dataclass(frozen=True, slots=True)
class Owner:
    """A resource's owner: None for a default workspace, project or template."""

    owner_id: int | None
    username: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class CheckpointOwner:
    """A checkpoint's trial, task, experiment and owner, and whether it is a model version."""

    trial_id: int | None
    task_id: str | None
    #: None (and no owner) for a checkpoint of no experiment.
    experiment_id: int | None
    owner_id: int | None
    username: str | None
    registered: bool


def checkpoint(conn: Conn, uuid: str) -> CheckpointOwner | None:
    """A checkpoint's trial, task, experiment and owner (None for a checkpoint of no
    experiment), and whether it is registered as a model version."""
    return (
        conn.cursor(row_factory=class_row(CheckpointOwner))
        .execute(
            "SELECT c.trial_id, c.task_id, e.id AS experiment_id, e.owner_id, u.username,"
            " EXISTS (SELECT 1 FROM model_versions v WHERE v.checkpoint_uuid = c.uuid) AS registered"
            " FROM checkpoints c LEFT JOIN trials t ON t.id = c.trial_id"
            " LEFT JOIN experiments e ON e.id = t.experiment_id LEFT JOIN users u ON u.id = e.owner_id"
            " WHERE c.uuid = %s",
            (uuid,),
        )
        .fetchone()
    )


def gc_task_has(conn: Conn, allocation_id: str, uuid: str) -> bool:
    """Whether the checkpoint-GC task of ``allocation_id`` was given checkpoint ``uuid``."""
    row = conn.execute(
        "SELECT 1 FROM checkpoint_gc WHERE allocation_id = %s AND %s::uuid = ANY(uuids)",
        (allocation_id, uuid),
    ).fetchone()
    return row is not None


# The owner of each kind of resource, as (FROM, key column): ``t`` is the row with the
# ``owner_id``, the resource itself or what it belongs to (a trial's experiment, an allocation's
# job). Experiments, jobs and models always have an owner; workspaces, projects and templates
# have None for the defaults.
_OWNED = {
    "experiment": ("experiments t", "t.id"),
    "trial": ("trials x JOIN experiments t ON t.id = x.experiment_id", "x.id"),
    "job": ("jobs t", "t.id"),
    "allocation": ("allocations x JOIN jobs t ON t.id = x.job_id", "x.id"),
    "model": ("models t", "t.name"),
    "workspace": ("workspaces t", "t.id"),
    "project": ("projects t", "t.id"),
    "template": ("templates t", "t.name"),
}


def of(conn: Conn, kind: str, key: object) -> Owner | None:
    """The owner of the experiment, trial (its experiment's), job, allocation (its job's),
    workspace or project (by id), model or template (by name) ``key``."""
    source, column = _OWNED[kind]
    cur = conn.cursor(row_factory=class_row(Owner))
    return cur.execute(
        f"SELECT t.owner_id, u.username FROM {source} LEFT JOIN users u ON u.id = t.owner_id"
        f" WHERE {column} = %s",
        (key,),
    ).fetchone()


def ntsc_task(conn: Conn, task_id: str, kind: str) -> Owner | None:
    """An interactive task's owner (a command, notebook, shell or TensorBoard of ``kind``)."""
    cur = conn.cursor(row_factory=class_row(Owner))
    return cur.execute(
        "SELECT n.owner_id, u.username FROM ntsc_tasks n JOIN users u ON u.id = n.owner_id"
        " WHERE n.id = %s AND n.kind = %s",
        (task_id, kind),
    ).fetchone()


def task_job(conn: Conn, task_id: str) -> tuple[str, bool] | None:
    """The job of task ``task_id`` and whether it is an interactive task's (a command,
    notebook, shell or TensorBoard) rather than an experiment's (a trial, a checkpoint GC);
    None when there is no such task."""
    row = db.fetch_row(
        conn,
        _TaskJob,
        "SELECT n.job_id, true AS interactive FROM ntsc_tasks n WHERE n.id = %(t)s"
        " UNION ALL (SELECT a.job_id, false FROM allocations a WHERE a.task_id = %(t)s LIMIT 1)"
        " LIMIT 1",
        {"t": task_id},
    )
    return (row.job_id, row.interactive) if row is not None else None


@dataclasses.dataclass(frozen=True, slots=True)
class _TaskJob:
    job_id: str
    interactive: bool


def job_is_experiment(conn: Conn, job_id: str) -> bool:
    """Whether job ``job_id`` is an experiment's (else an interactive task's or none)."""
    return bool(
        db.scalar(conn, bool, "SELECT experiment_id IS NOT NULL FROM jobs WHERE id = %s", (job_id,))
    )
