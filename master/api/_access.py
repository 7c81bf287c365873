"""Who may change what: the one ownership rule, applied by every route that writes.

* **Users** read everything (Determined's open-source edition has no per-user read
  permissions). Changing a resource is for its owner and for admins: an experiment's owner owns
  its trials, checkpoints, allocations and job; a model's owner owns its versions. Workspaces,
  projects and templates belong to whoever created them; the default "Uncategorized" workspace
  and project (no owner) are for admins. Any user may add a project to a workspace and put
  experiments in any project that is not archived.
* **Tasks** (allocation tokens) act for their experiment's owner but only inside their own
  task: their own allocation, trial and experiment (:func:`check_task_scope`), checkpoints of
  their own trial (create once, report deletions), and reads of checkpoints whose experiment
  has the same owner or that are registered as model versions (a warm start or a registry
  model), nothing else.
* **Agents** use only the agent protocol (their routes are marked with ``allow(AGENT)``).

Every function raises :class:`NotFound` for a missing resource and :class:`PermissionDenied`
naming the owner otherwise; none of them writes.
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

from det.master.api._common import check_task_scope, principal
from det.master.db import Conn
from det.master.errors import InvalidArgument, NotFound, PermissionDenied


def _may_change(owner_id: int, what: str, owner_name: str) -> None:
    """A user changes what they own (admins anything); a task acts for its experiment's owner
    (and is held to its own task by :func:`check_task_scope` before this)."""
    p = principal()
    if p.user is not None and (p.user.admin or p.user.id == owner_id):
        return
    if p.user is None and p.task is not None and p.task.user_id == owner_id:
        return
    raise PermissionDenied(
        f"{what} belongs to {owner_name}; only its owner or an admin may change it"
    )


def experiment(conn: Conn, experiment_id: int) -> None:
    """The caller may change experiment ``experiment_id``."""
    check_task_scope(experiment_id=experiment_id)
    row = conn.execute(
        "SELECT e.owner_id, u.username FROM experiments e JOIN users u ON u.id = e.owner_id"
        " WHERE e.id = %s",
        (experiment_id,),
    ).fetchone()
    if row is None:
        raise NotFound(f"experiment {experiment_id} not found")
    _may_change(row["owner_id"], f"experiment {experiment_id}", row["username"])


def trial(conn: Conn, trial_id: int) -> None:
    """The caller may change trial ``trial_id`` (report to it, kill it, stop it early)."""
    check_task_scope(trial_id=trial_id)
    if principal().task is not None:
        return  # its own trial (checked above): no query on the metric-report path
    row = conn.execute(
        "SELECT e.owner_id, u.username FROM trials t JOIN experiments e ON e.id = t.experiment_id"
        " JOIN users u ON u.id = e.owner_id WHERE t.id = %s",
        (trial_id,),
    ).fetchone()
    if row is None:
        raise NotFound(f"trial {trial_id} not found")
    _may_change(row["owner_id"], f"trial {trial_id}", row["username"])


def allocation(conn: Conn, allocation_id: str) -> None:
    """The caller may act on allocation ``allocation_id`` (its signals)."""
    check_task_scope(allocation_id=allocation_id)
    if principal().task is not None:
        return  # its own allocation (checked above)
    row = conn.execute(
        "SELECT j.owner_id, u.username FROM allocations a JOIN jobs j ON j.id = a.job_id"
        " JOIN users u ON u.id = j.owner_id WHERE a.id = %s",
        (allocation_id,),
    ).fetchone()
    if row is None:
        raise NotFound(f"allocation {allocation_id} not found")
    _may_change(row["owner_id"], f"allocation {allocation_id}", row["username"])


def job(conn: Conn, job_id: str) -> None:
    """The caller may change job ``job_id`` (priority, weight, pool, queue position)."""
    row = conn.execute(
        "SELECT j.owner_id, u.username FROM jobs j JOIN users u ON u.id = j.owner_id"
        " WHERE j.id = %s",
        (job_id,),
    ).fetchone()
    if row is None:
        raise NotFound(f"job {job_id} not found")
    if principal().task is not None:
        raise PermissionDenied("an allocation token cannot change jobs")
    _may_change(row["owner_id"], f"job {job_id}", row["username"])


def checkpoint(conn: Conn, uuid: str, *, for_write: bool) -> dict[str, Any] | None:
    """The caller may read (or change) checkpoint ``uuid``; None when it does not exist."""
    try:
        uuidlib.UUID(uuid)
    except ValueError:
        raise InvalidArgument(f"checkpoint uuid {uuid!r} is not a UUID") from None
    row = conn.execute(
        "SELECT c.trial_id, c.task_id, e.id AS experiment_id, e.owner_id, u.username,"
        " EXISTS (SELECT 1 FROM model_versions v WHERE v.checkpoint_uuid = c.uuid) AS registered"
        " FROM checkpoints c LEFT JOIN trials t ON t.id = c.trial_id"
        " LEFT JOIN experiments e ON e.id = t.experiment_id LEFT JOIN users u ON u.id = e.owner_id"
        " WHERE c.uuid = %s",
        (uuid,),
    ).fetchone()
    if row is None:
        return None
    p = principal()
    if p.task is not None:
        own_trial = row["trial_id"] is not None and row["trial_id"] == p.task.trial_id
        own_task = row["task_id"] is not None and row["task_id"] == p.task.task_id
        if own_trial or own_task:
            return dict(row)
        if for_write and _gc_task_may_delete(conn, p.task.allocation_id, uuid):
            return dict(row)
        if not for_write and (row["registered"] or row["owner_id"] == p.task.user_id):
            return dict(row)
        raise PermissionDenied(f"checkpoint {uuid} is not this task's")
    if for_write:
        if row["owner_id"] is None:
            if p.user is None or not p.user.admin:
                raise PermissionDenied(
                    f"checkpoint {uuid} has no experiment; only an admin may change it"
                )
        else:
            _may_change(row["owner_id"], f"checkpoint {uuid}", row["username"])
    return dict(row)


def _gc_task_may_delete(conn: Conn, allocation_id: str, uuid: str) -> bool:
    """A checkpoint-GC task may report the deletion of the checkpoints it was given."""
    row = conn.execute(
        "SELECT 1 FROM checkpoint_gc WHERE allocation_id = %s AND %s::uuid = ANY(uuids)",
        (allocation_id, uuid),
    ).fetchone()
    return row is not None


def model(conn: Conn, name: str) -> None:
    """The caller may change model ``name`` (register versions, edit it)."""
    row = conn.execute(
        "SELECT m.owner_id, u.username FROM models m JOIN users u ON u.id = m.owner_id"
        " WHERE m.name = %s",
        (name,),
    ).fetchone()
    if row is None:
        raise NotFound(f"model {name} not found")
    _may_change(row["owner_id"], f"model {name}", row["username"])


def _owned(conn: Conn, table: str, key: str, value: object, what: str) -> None:
    """Workspaces, projects and templates: an owner of NULL (the defaults) is for admins."""
    row = conn.execute(
        f"SELECT t.owner_id, u.username FROM {table} t LEFT JOIN users u ON u.id = t.owner_id"
        f" WHERE t.{key} = %s",
        (value,),
    ).fetchone()
    if row is None:
        raise NotFound(f"{what} not found")
    if row["owner_id"] is None:
        p = principal()
        if p.user is None or not p.user.admin:
            raise PermissionDenied(f"{what} is a default; only an admin may change it")
        return
    _may_change(row["owner_id"], what, row["username"])


def workspace(conn: Conn, workspace_id: int) -> None:
    """The caller may change workspace ``workspace_id`` (edit, archive, delete it)."""
    _owned(conn, "workspaces", "id", workspace_id, f"workspace {workspace_id}")


def project(conn: Conn, project_id: int) -> None:
    """The caller may change project ``project_id`` (edit, archive, move, delete it)."""
    _owned(conn, "projects", "id", project_id, f"project {project_id}")


def template(conn: Conn, name: str) -> None:
    """The caller may change template ``name``."""
    _owned(conn, "templates", "name", name, f"template {name}")


def ntsc_task(conn: Conn, task_id: str, kind: str) -> None:
    """The caller may change (kill, reprioritise, reach through the proxy) the interactive task
    ``task_id`` of ``kind``: its owner or an admin; tasks' own tokens may not."""
    row = conn.execute(
        "SELECT n.owner_id, u.username FROM ntsc_tasks n JOIN users u ON u.id = n.owner_id"
        " WHERE n.id = %s AND n.kind = %s",
        (task_id, kind),
    ).fetchone()
    if row is None:
        raise NotFound(f"{kind.lower()} {task_id} not found")
    if principal().task is not None:
        raise PermissionDenied("an allocation token cannot change interactive tasks")
    _may_change(row["owner_id"], f"{kind.lower()} {task_id}", row["username"])
