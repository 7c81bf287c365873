"""Who may change what: ownership and the role table (:mod:`det.master.authz`), applied by
every route that writes.

* **Users**: changing a resource is for its owner and for whoever holds a role that allows it
  in the resource's workspace (:data:`det.master.authz.TABLE`): a workspace's Editors pause,
  activate, kill, archive, move and edit every experiment and interactive task in it; its
  WorkspaceAdmins also change its projects and templates and delete its experiments; admins are
  ClusterAdmins. An experiment's owner owns its trials, checkpoints, allocations and job (those
  stay owner-only); a model's owner owns its versions. Workspaces, projects and templates belong
  to whoever created them; the default "Uncategorized" workspace and project (no owner) are for
  its WorkspaceAdmins and admins. Reading a workspace, its projects and templates needs a role
  there (every user is an open workspace's Editor).
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

from det.master import authz
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


def _by_role(
    conn: Conn, permission: str, kind: str, key: object, row: owners.Owner, what: str
) -> None:
    """A user: the object's owner, or a role allowing ``permission`` in its workspace; a task:
    its experiment's owner only (:func:`_may_change`)."""
    p = principal()
    if p.user is None:
        _may_change(row.owner_id, what, row.username)
        return
    workspace_id = authz.workspace_of(conn, kind, key)
    authz.require(
        conn, p.user.id, p.user.admin, permission, workspace_id, owner_id=row.owner_id, what=what
    )


def experiment(conn: Conn, experiment_id: int, permission: str | None = None) -> None:
    """The caller may change experiment ``experiment_id``: with ``permission``
    (``experiment.update``, ``experiment.delete``) its owner or a role allowing it in its
    workspace; without, its owner or an admin only (what reports into it or keeps its data:
    unmanaged trials, custom webhook events, log retention)."""
    check_task_scope(experiment_id=experiment_id)
    row = owners.of(conn, "experiment", experiment_id)
    if row is None:
        raise NotFound(f"experiment {experiment_id} not found")
    if permission is None:
        _may_change(row.owner_id, f"experiment {experiment_id}", row.username)
        return
    _by_role(conn, permission, "experiment", experiment_id, row, f"experiment {experiment_id}")


def trial(conn: Conn, trial_id: int, permission: str | None = None) -> None:
    """The caller may change trial ``trial_id``: report to it, stop it early (its owner or an
    admin), or with ``permission`` (``experiment.update``: kill it) a role allowing it in its
    workspace too."""
    check_task_scope(trial_id=trial_id)
    if principal().task is not None:
        return  # its own trial (checked above): no query on the metric-report path
    row = owners.of(conn, "trial", trial_id)
    if row is None:
        raise NotFound(f"trial {trial_id} not found")
    if permission is None:
        _may_change(row.owner_id, f"trial {trial_id}", row.username)
        return
    _by_role(conn, permission, "trial", trial_id, row, f"trial {trial_id}")


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
    """The caller may change job ``job_id`` (priority, weight, pool, queue position): its
    owner, or an Editor of its experiment's or task's workspace (``experiment.update``,
    ``task.update``)."""
    row = owners.of(conn, "job", job_id)
    if row is None:
        raise NotFound(f"job {job_id} not found")
    if principal().task is not None:
        raise PermissionDenied("an allocation token cannot change jobs")
    permission = "experiment.update" if owners.job_is_experiment(conn, job_id) else "task.update"
    _by_role(conn, permission, "job", job_id, row, f"job {job_id}")


def checkpoint(conn: Conn, uuid: str, *, for_write: bool) -> owners.CheckpointOwner | None:
    """The caller may read (or change) checkpoint ``uuid``; None when it does not exist. A user
    reads a checkpoint of a private workspace's experiment with ``experiment.view`` there."""
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
    if not for_write and p.user is not None and row.experiment_id is not None:
        # A private workspace's experiment's checkpoints are its members' to read.
        _read(conn, "experiment", row.experiment_id, f"checkpoint {uuid}")
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


def _owned(conn: Conn, kind: str, key: object, what: str, permission: str) -> None:
    """Workspaces, projects and templates: their owner, or a role allowing ``permission`` in
    their workspace (an owner of NULL, the defaults: its WorkspaceAdmins and admins)."""
    row = owners.of(conn, kind, key)
    if row is None:
        raise NotFound(f"{what} not found")
    p = principal()
    if p.user is None:
        raise PermissionDenied(f"an allocation token cannot change {what}")
    _by_role(conn, permission, kind, key, row, what)


def workspace(conn: Conn, workspace_id: int, permission: str = "workspace.update") -> None:
    """The caller may change workspace ``workspace_id`` (edit, archive, delete it)."""
    _owned(conn, "workspace", workspace_id, f"workspace {workspace_id}", permission)


def project(conn: Conn, project_id: int) -> None:
    """The caller may change project ``project_id`` (edit, archive, move, delete it)."""
    _owned(conn, "project", project_id, f"project {project_id}", "project.update")


def template(conn: Conn, name: str) -> None:
    """The caller may change template ``name``."""
    _owned(conn, "template", name, f"template {name}", "template.update")


def in_workspace(conn: Conn, permission: str, workspace_id: int, what: str = "") -> None:
    """The calling user holds a role allowing ``permission`` in workspace ``workspace_id``
    (reading it, creating a project or a template in it...). A task principal acts for its
    experiment's owner."""
    p = principal()
    if p.user is not None:
        authz.require(conn, p.user.id, p.user.admin, permission, workspace_id, what=what)
    elif p.task is not None and p.task.user_id is not None:
        authz.require(conn, p.task.user_id, False, permission, workspace_id, what=what)
    else:
        raise PermissionDenied("a user session is required")


def read(conn: Conn, kind: str, key: object, what: str) -> None:
    """The caller may read the workspace, project or template ``key`` (``workspace.view``,
    ``project.view``, ``template.view`` in its workspace; its owner always)."""
    workspace_id = authz.workspace_of(conn, kind, key)
    if workspace_id is None:
        raise NotFound(f"{what} not found")
    p = principal()
    row = owners.of(conn, kind, key)
    owner = row.owner_id if row is not None else None
    user_id = p.user.id if p.user is not None else p.task.user_id if p.task is not None else None
    if user_id is None:
        raise PermissionDenied("a user session is required")
    admin = p.user.admin if p.user is not None else False
    authz.require(
        conn, user_id, admin, f"{kind}.view", workspace_id, owner_id=owner,
        what=what if kind != "workspace" else "",
    )  # fmt: skip


def ntsc_task(conn: Conn, task_id: str, kind: str) -> None:
    """The caller may change (kill, reprioritise, reach through the proxy) the interactive task
    ``task_id`` of ``kind``: its owner, or ``task.update`` in its workspace (its Editors);
    tasks' own tokens may not."""
    row = owners.ntsc_task(conn, task_id, kind)
    if row is None:
        raise NotFound(f"{kind.lower()} {task_id} not found")
    if principal().task is not None:
        raise PermissionDenied("an allocation token cannot change interactive tasks")
    _by_role(conn, "task.update", "task", task_id, row, f"{kind.lower()} {task_id}")


def read_task(conn: Conn, task_id: str) -> None:
    """A user may read task ``task_id`` (GetTask, its logs): a trial's or checkpoint GC's as
    its experiment (``experiment.view``), an interactive task's as its workspace's tasks
    (``task.view``); its owner always; an open workspace's are every user's. NotFound when
    there is no such task."""
    found = owners.task_job(conn, task_id)
    if found is None:
        raise NotFound(f"task {task_id} not found")
    p = principal()
    if p.user is None or p.user.admin:
        return  # a task reads its own (check_task_scope, before this)
    job_id, interactive = found
    workspace_id = authz.private_workspace_of(conn, "job", job_id)
    if workspace_id is None:
        return
    row = owners.of(conn, "job", job_id)
    authz.require(
        conn, p.user.id, False, "task.view" if interactive else "experiment.view", workspace_id,
        owner_id=row.owner_id if row else None, what=f"task {task_id}",
    )  # fmt: skip


def _read(conn: Conn, kind: str, key: int, what: str) -> None:
    p = principal()
    if p.user is None or p.user.admin:
        return  # a task reads its own (check_task_scope, before this)
    workspace_id = authz.private_workspace_of(conn, kind, key)
    if workspace_id is None:
        return  # an open workspace's: every user's
    row = owners.of(conn, kind, key)
    authz.require(
        conn, p.user.id, False, "experiment.view", workspace_id,
        owner_id=row.owner_id if row else None, what=what,
    )  # fmt: skip


def read_experiment(conn: Conn, experiment_id: int) -> None:
    """A user may read experiment ``experiment_id`` (its page, trials, checkpoints, code): its
    owner, or ``experiment.view`` in its workspace; an open workspace's are every user's (one
    short statement)."""
    _read(conn, "experiment", experiment_id, f"experiment {experiment_id}")


def read_trial(conn: Conn, trial_id: int) -> None:
    """A user may read trial ``trial_id`` (its page, metrics, checkpoints, logs): as its
    experiment (:func:`read_experiment`)."""
    _read(conn, "trial", trial_id, f"trial {trial_id}")
