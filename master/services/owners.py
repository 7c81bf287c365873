"""Who owns what: the rows ``api/_access.py`` applies its one ownership rule to.

Each function returns the owner's id and username (``owner_id``, ``username``) of one resource,
or None when the resource does not exist; none of them writes. A default workspace, project or
template has an ``owner_id`` of None (it is for admins).
"""

from __future__ import annotations

from typing import Any

from det.master.db import Conn

Row = dict[str, Any]


def _one(conn: Conn, sql: str, *args: object) -> Row | None:
    row = conn.execute(sql, args).fetchone()
    return dict(row) if row is not None else None


def trial(conn: Conn, trial_id: int) -> Row | None:
    """A trial's owner: its experiment's."""
    return _one(
        conn,
        "SELECT e.owner_id, u.username FROM trials t JOIN experiments e ON e.id = t.experiment_id"
        " JOIN users u ON u.id = e.owner_id WHERE t.id = %s",
        trial_id,
    )


def allocation(conn: Conn, allocation_id: str) -> Row | None:
    """An allocation's owner: its job's."""
    return _one(
        conn,
        "SELECT j.owner_id, u.username FROM allocations a JOIN jobs j ON j.id = a.job_id"
        " JOIN users u ON u.id = j.owner_id WHERE a.id = %s",
        allocation_id,
    )


def checkpoint(conn: Conn, uuid: str) -> Row | None:
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


# Resources with an owner column of their own, by kind: (table, key column). Experiments, jobs
# and models always have an owner; workspaces, projects and templates have None for the
# defaults.
_OWNED = {
    "experiment": ("experiments", "id"),
    "job": ("jobs", "id"),
    "model": ("models", "name"),
    "workspace": ("workspaces", "id"),
    "project": ("projects", "id"),
    "template": ("templates", "name"),
}


def of(conn: Conn, kind: str, key: object) -> Row | None:
    """The owner of the experiment, job, workspace, project (by id), model or template (by
    name) ``key``."""
    table, column = _OWNED[kind]
    return _one(
        conn,
        f"SELECT t.owner_id, u.username FROM {table} t LEFT JOIN users u ON u.id = t.owner_id"
        f" WHERE t.{column} = %s",
        key,
    )


def ntsc_task(conn: Conn, task_id: str, kind: str) -> Row | None:
    """An interactive task's owner (a command, notebook, shell or TensorBoard of ``kind``)."""
    return _one(
        conn,
        "SELECT n.owner_id, u.username FROM ntsc_tasks n JOIN users u ON u.id = n.owner_id"
        " WHERE n.id = %s AND n.kind = %s",
        task_id,
        kind,
    )
