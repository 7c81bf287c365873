"""Who owns what: the rows ``api/_access.py`` applies its one ownership rule to.

Each function returns the owner's id and username (``owner_id``, ``username``) of one resource,
or None when the resource does not exist; none of them writes. A default workspace, project or
template has an ``owner_id`` of None (it is for admins).
"""

from __future__ import annotations

from typing import Any

from det.master.db import Conn


def _one(conn: Conn, sql: str, *args: object) -> dict[str, Any] | None:
    row = conn.execute(sql, args).fetchone()
    return dict(row) if row is not None else None


def checkpoint(conn: Conn, uuid: str) -> dict[str, Any] | None:
    """A checkpoint's trial, task, experiment and owner (None for a checkpoint of no
    experiment), and whether it is registered as a model version."""
    return _one(
        conn,
        "SELECT c.trial_id, c.task_id, e.id AS experiment_id, e.owner_id, u.username,"
        " EXISTS (SELECT 1 FROM model_versions v WHERE v.checkpoint_uuid = c.uuid) AS registered"
        " FROM checkpoints c LEFT JOIN trials t ON t.id = c.trial_id"
        " LEFT JOIN experiments e ON e.id = t.experiment_id LEFT JOIN users u ON u.id = e.owner_id"
        " WHERE c.uuid = %s",
        uuid,
    )


def gc_task_has(conn: Conn, allocation_id: str, uuid: str) -> bool:
    """Whether the checkpoint-GC task of ``allocation_id`` was given checkpoint ``uuid``."""
    return (
        _one(
            conn,
            "SELECT 1 FROM checkpoint_gc WHERE allocation_id = %s AND %s::uuid = ANY(uuids)",
            allocation_id,
            uuid,
        )
        is not None
    )


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


def of(conn: Conn, kind: str, key: object) -> dict[str, Any] | None:
    """The owner of the experiment, trial (its experiment's), job, allocation (its job's),
    workspace or project (by id), model or template (by name) ``key``."""
    source, column = _OWNED[kind]
    return _one(
        conn,
        f"SELECT t.owner_id, u.username FROM {source} LEFT JOIN users u ON u.id = t.owner_id"
        f" WHERE {column} = %s",
        key,
    )


def ntsc_task(conn: Conn, task_id: str, kind: str) -> dict[str, Any] | None:
    """An interactive task's owner (a command, notebook, shell or TensorBoard of ``kind``)."""
    return _one(
        conn,
        "SELECT n.owner_id, u.username FROM ntsc_tasks n JOIN users u ON u.id = n.owner_id"
        " WHERE n.id = %s AND n.kind = %s",
        task_id,
        kind,
    )
