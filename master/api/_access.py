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

from det.master.api._common import Conn, check_task_scope, principal
from det.master.errors import InvalidArgument, NotFound, PermissionDenied
from det.master.services import owners


def _may_change(owner_id: int | None, what: str, owner_name: str | None) -> None:
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
    row = owners.of(conn, "experiment", experiment_id)
    if row is None:
        raise NotFound(f"experiment {experiment_id} not found")
    _may_change(row.owner_id, f"experiment {experiment_id}", row.username)


def trial(conn: Conn, trial_id: int) -> None:
    """The caller may change trial ``trial_id`` (report to it, kill it, stop it early)."""
    check_task_scope(trial_id=trial_id)
    if principal().task is not None:
        return  # its own trial (checked above): no query on the metric-report path
    row = owners.of(conn, "trial", trial_id)
    if row is None:
        raise NotFound(f"trial {trial_id} not found")
    _may_change(row.owner_id, f"trial {trial_id}", row.username)


def allocation(conn: Conn, allocation_id: str) -> None:
    """The caller may act on allocation ``allocation_id`` (its signals)."""
    check_task_scope(allocation_id=allocation_id)
    if principal().task is not None:
        return  # its own allocation (checked above)
    row = owners.of(conn, "allocation", allocation_id)
    if row is None:
        raise NotFound(f"allocation {allocation_id} not found")
    _may_change(row.owner_id, f"allocation {allocation_id}", row.username)


def job(conn: Conn, job_id: str) -> None:
    """The caller may change job ``job_id`` (priority, weight, pool, queue position)."""
    row = owners.of(conn, "job", job_id)
    if row is None:
        raise NotFound(f"job {job_id} not found")
    if principal().task is not None:
        raise PermissionDenied("an allocation token cannot change jobs")
    _may_change(row.owner_id, f"job {job_id}", row.username)


def checkpoint(conn: Conn, uuid: str, *, for_write: bool) -> owners.CheckpointOwner | None:
    """The caller may read (or change) checkpoint ``uuid``; None when it does not exist."""
    try:
        uuidlib.UUID(uuid)
    except ValueError:
        raise InvalidArgument(f"checkpoint uuid {uuid!r} is not a UUID") from None
    row = owners.checkpoint(conn, uuid)
    if row is None:
        return None
    p = principal()
    if p.task is not None:
        own_trial = row.trial_id is not None and row.trial_id == p.task.trial_id
        own_task = row.task_id is not None and row.task_id == p.task.task_id
        if own_trial or own_task:
            return row
        if for_write and owners.gc_task_has(conn, p.task.allocation_id, uuid):
            return row  # a checkpoint-GC task reports the deletion of those it was given
        if not for_write and (row.registered or row.owner_id == p.task.user_id):
            return row
        raise PermissionDenied(f"checkpoint {uuid} is not this task's")
    if for_write:
        if row.owner_id is None:
            if p.user is None or not p.user.admin:
                raise PermissionDenied(
                    f"checkpoint {uuid} has no experiment; only an admin may change it"
                )
        else:
            _may_change(row.owner_id, f"checkpoint {uuid}", row.username)
    return row


def model(conn: Conn, name: str) -> None:
    """The caller may change model ``name`` (register versions, edit it)."""
    row = owners.of(conn, "model", name)
    if row is None:
        raise NotFound(f"model {name} not found")
    _may_change(row.owner_id, f"model {name}", row.username)


def _owned(conn: Conn, kind: str, key: object, what: str) -> None:
    """Workspaces, projects and templates: an owner of NULL (the defaults) is for admins."""
    row = owners.of(conn, kind, key)
    if row is None:
        raise NotFound(f"{what} not found")
    if row.owner_id is None:
        p = principal()
        if p.user is None or not p.user.admin:
            raise PermissionDenied(f"{what} is a default; only an admin may change it")
        return
    _may_change(row.owner_id, what, row.username)


def workspace(conn: Conn, workspace_id: int) -> None:
    """The caller may change workspace ``workspace_id`` (edit, archive, delete it)."""
    _owned(conn, "workspace", workspace_id, f"workspace {workspace_id}")


def project(conn: Conn, project_id: int) -> None:
    """The caller may change project ``project_id`` (edit, archive, move, delete it)."""
    _owned(conn, "project", project_id, f"project {project_id}")


def template(conn: Conn, name: str) -> None:
    """The caller may change template ``name``."""
    _owned(conn, "template", name, f"template {name}")


def ntsc_task(conn: Conn, task_id: str, kind: str) -> None:
    """The caller may change (kill, reprioritise, reach through the proxy) the interactive task
    ``task_id`` of ``kind``: its owner or an admin; tasks' own tokens may not."""
    row = owners.ntsc_task(conn, task_id, kind)
    if row is None:
        raise NotFound(f"{kind.lower()} {task_id} not found")
    if principal().task is not None:
        raise PermissionDenied("an allocation token cannot change interactive tasks")
    _may_change(row.owner_id, f"{kind.lower()} {task_id}", row.username)
