"""Roles: what each role may do on every kind of object in a workspace, written once.

:data:`TABLE` is the only statement of what a role allows; ``api/_access.py``, the services
that create work (experiments, interactive tasks, projects, templates) and the role API read it
through :func:`require` and :func:`allowed`. docs/security.md ("Roles") shows it.

Who holds a role in a workspace (:func:`roles_in`):

* **assigned**: a ``role_assignments`` row for the user or one of their groups, on that
  workspace or on the cluster (a cluster assignment holds in every workspace);
* **admins** (the users' ``admin`` flag) hold ClusterAdmin;
* **open workspaces**: while nobody has assigned a role on a workspace, every user is implicitly
  its Editor (open-source Determined's rules for a team of one). The first role assigned on a
  workspace makes it a private team space (``workspaces.private``, for good: removing the last
  assignment does not open it to everyone): from then only its members (and cluster-wide
  holders) have a role there, and its owner (who created it) is its WorkspaceAdmin.

Besides roles, an object's **owner** (whoever created it) keeps every right on that object, as
before roles existed. Two things an implicit role does not give: applying a template that holds
secrets (storage keys, registry passwords) needs its owner, an *assigned* Editor (or higher) of
the template's workspace or a ClusterAdmin; and assigning roles needs WorkspaceAdmin (assigned),
the workspace's owner or a ClusterAdmin.

Nothing here writes; a refusal is :class:`PermissionDenied` with one line naming the workspace
and the role needed.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from det.master import db
from det.master.db import Conn
from det.master.errors import NotFound, PermissionDenied
from det.master.rows.workspaces import WorkspaceAccess


class Role(enum.Enum):
    """The roles, weakest first; ``value`` is the name stored and shown."""

    VIEWER = "Viewer"
    EDITOR = "Editor"
    WORKSPACE_ADMIN = "WorkspaceAdmin"
    CLUSTER_ADMIN = "ClusterAdmin"


#: Role ids on Determined's wire (its migrations' ids for the same roles).
WIRE_IDS: dict[Role, int] = {
    Role.CLUSTER_ADMIN: 1,
    Role.WORKSPACE_ADMIN: 2,
    Role.VIEWER: 4,
    Role.EDITOR: 5,
}

# Permissions, as "kind.action". What each action covers (the routes that check it):
#   workspace.view    read the workspace, its projects and pools
#   workspace.update  edit, archive, unarchive, delete it; set its default pools
#   workspace.assign  assign and remove roles on it
#   project.view      read a project of it
#   project.create    create a project in it
#   project.update    edit, archive, move, delete another user's project in it
#   experiment.view   read its experiments (not yet enforced on reads: docs/security.md)
#   experiment.create create an experiment in one of its projects (or move one into it)
#   experiment.update pause, activate, cancel, kill, archive, unarchive, move, edit (notes,
#                     labels, description), continue any experiment in it
#   experiment.delete delete another user's experiment in it (and its TensorBoard files)
#   task.view         read its commands, notebooks, shells, TensorBoards
#   task.create       launch one in it (its pool bindings follow)
#   task.update       kill one, change its priority
#   template.view     list, read and apply (when it holds no secret) its templates
#   template.create   create a template in it
#   template.secrets  apply one of its templates that holds secrets (assigned roles only)
#   template.update   edit, rename, delete another user's template in it
#   cluster.assign    assign and remove roles on the cluster; manage user groups
_VIEW = frozenset(
    {"workspace.view", "project.view", "experiment.view", "task.view", "template.view"}
)
_EDIT = _VIEW | {
    "project.create",
    "experiment.create",
    "experiment.update",
    "task.create",
    "task.update",
    "template.create",
    "template.secrets",
}
_WORKSPACE_ADMIN = _EDIT | {
    "workspace.update",
    "workspace.assign",
    "project.update",
    "experiment.delete",
    "template.update",
}

#: What each role allows in a workspace where it is held.
TABLE: dict[Role, frozenset[str]] = {
    Role.VIEWER: _VIEW,
    Role.EDITOR: frozenset(_EDIT),
    Role.WORKSPACE_ADMIN: frozenset(_WORKSPACE_ADMIN),
    Role.CLUSTER_ADMIN: frozenset(_WORKSPACE_ADMIN | {"cluster.assign"}),
}

PERMISSIONS: tuple[str, ...] = tuple(sorted(TABLE[Role.CLUSTER_ADMIN]))

#: Permissions an implicit role (an open workspace's Editor) does not give.
_ASSIGNED_ONLY = frozenset({"template.secrets", "workspace.assign", "cluster.assign"})

# What a refusal says the caller tried, per permission.
_DOING = {
    "workspace.view": "reading it",
    "workspace.update": "changing it",
    "workspace.assign": "assigning roles on it",
    "project.view": "reading its projects",
    "project.create": "creating a project in it",
    "project.update": "changing another user's project in it",
    "experiment.view": "reading its experiments",
    "experiment.create": "creating an experiment in it",
    "experiment.update": "changing another user's experiment in it",
    "experiment.delete": "deleting another user's experiment in it",
    "task.view": "reading its tasks",
    "task.create": "launching a task in it",
    "task.update": "changing another user's task in it",
    "template.view": "using its templates",
    "template.create": "creating a template in it",
    "template.secrets": "applying another user's template that holds secrets",
    "template.update": "changing another user's template in it",
    "cluster.assign": "managing roles and groups of the cluster",
}


def weakest_with(permission: str) -> Role:
    """The weakest role that allows ``permission``."""
    for role in Role:
        if permission in TABLE[role]:
            return role
    raise KeyError(permission)


def role_named(name: str) -> Role:
    for role in Role:
        if role.value.lower() == name.lower():
            return role
    raise NotFound(f"no role named {name!r} (roles: {', '.join(r.value for r in Role)})")


@dataclass(frozen=True)
class Held:
    """A user's roles in one workspace: ``assigned`` (rows, cluster-wide ones included, and
    the admin flag) and ``implicit`` (an open workspace's Editor)."""

    assigned: frozenset[Role]
    implicit: frozenset[Role]

    def allows(self, permission: str) -> bool:
        if any(permission in TABLE[r] for r in self.assigned):
            return True
        if permission in _ASSIGNED_ONLY:
            return False
        return any(permission in TABLE[r] for r in self.implicit)

    def names(self) -> list[str]:
        return [r.value for r in Role if r in self.assigned | self.implicit]


def roles_in(conn: Conn, user_id: int, admin: bool, workspace_id: int | None) -> Held:
    """The roles ``user_id`` holds in ``workspace_id`` (None: on the cluster itself)."""
    roles = db.column(
        conn,
        str,
        "SELECT a.role FROM role_assignments a"
        " WHERE (a.workspace_id IS NULL OR a.workspace_id = %(w)s)"
        " AND (a.user_id = %(u)s OR a.group_id IN"
        "      (SELECT group_id FROM user_group_members WHERE user_id = %(u)s))",
        {"w": workspace_id, "u": user_id},
    )
    assigned = {Role(r) for r in roles}
    if admin:
        assigned.add(Role.CLUSTER_ADMIN)
    implicit: set[Role] = set()
    if workspace_id is not None:
        ws = db.fetch_row(
            conn,
            WorkspaceAccess,
            "SELECT owner_id, private FROM workspaces WHERE id = %s",
            (workspace_id,),
        )
        if ws is not None and not ws.private:
            implicit.add(Role.EDITOR)
        elif ws is not None and ws.owner_id == user_id:
            assigned.add(Role.WORKSPACE_ADMIN)  # who made their workspace a team space
    return Held(frozenset(assigned), frozenset(implicit))


def is_admin(conn: Conn, user_id: int) -> bool:
    """The user's ``admin`` flag (for services that are handed only a user id)."""
    return bool(db.scalar(conn, bool, "SELECT admin FROM users WHERE id = %s", (user_id,)))


#: Whether any workspace is private, as an SQL expression (a statement that reads something else
#: in the same round trip selects it too: det.master.listcache.version_and_privacy).
ANY_PRIVATE = "EXISTS (SELECT 1 FROM workspaces WHERE private)"


def any_private(conn: Conn) -> bool:
    """Whether any workspace is private (else every user reads everything)."""
    return bool(db.scalar(conn, bool, f"SELECT {ANY_PRIVATE}"))


def is_private(conn: Conn, workspace_id: int) -> bool:
    """Whether workspace ``workspace_id`` is a private team space (a role was assigned on it
    once; else it is open)."""
    return bool(
        db.scalar(conn, bool, "SELECT private FROM workspaces WHERE id = %s", (workspace_id,))
    )


def allowed(
    conn: Conn,
    user_id: int,
    admin: bool,
    permission: str,
    workspace_id: int | None,
    *,
    owner_id: int | None = None,
) -> bool:
    """Whether the user may ``permission`` in ``workspace_id``: they own the object
    (``owner_id``) or hold a role that allows it there."""
    if owner_id is not None and owner_id == user_id:
        return True
    return roles_in(conn, user_id, admin, workspace_id).allows(permission)


def _workspace_name(conn: Conn, workspace_id: int) -> str:
    name = db.scalar(conn, str, "SELECT name FROM workspaces WHERE id = %s", (workspace_id,))
    return name if name is not None else str(workspace_id)


def require(
    conn: Conn,
    user_id: int,
    admin: bool,
    permission: str,
    workspace_id: int | None,
    *,
    owner_id: int | None = None,
    what: str = "",
) -> None:
    """:func:`allowed`, or PermissionDenied in one line: the object, the workspace, what was
    tried and the role it needs."""
    held = roles_in(conn, user_id, admin, workspace_id)
    if (owner_id is not None and owner_id == user_id) or held.allows(permission):
        return
    needed = weakest_with(permission)
    if permission in _ASSIGNED_ONLY and Role.EDITOR in held.implicit:
        has = "an open workspace's Editor, which does not count for this"
    else:
        has = ", ".join(held.names()) or "none"
    subject = f"{what} is in workspace" if what else "workspace"
    if workspace_id is None:
        raise PermissionDenied(
            f"{_DOING[permission]} needs the {needed.value} role on the cluster (you hold: {has})"
        )
    raise PermissionDenied(
        f"{subject} '{_workspace_name(conn, workspace_id)}': {_DOING[permission]} needs the"
        f" {needed.value} role there (you hold: {has})"
    )


# The workspace each kind of object lives in, by its key.
_WORKSPACE_OF = {
    "experiment": "SELECT p.workspace_id FROM experiments e"
    " JOIN projects p ON p.id = e.project_id WHERE e.id = %s",
    "trial": "SELECT p.workspace_id FROM trials t JOIN experiments e ON e.id = t.experiment_id"
    " JOIN projects p ON p.id = e.project_id WHERE t.id = %s",
    "task": "SELECT workspace_id FROM ntsc_tasks WHERE id = %s",
    # an experiment's job: its project's workspace; an interactive task's: the task's
    "job": "SELECT coalesce(p.workspace_id, n.workspace_id) AS workspace_id FROM jobs j"
    " LEFT JOIN experiments e ON e.id = j.experiment_id LEFT JOIN projects p ON p.id = e.project_id"
    " LEFT JOIN ntsc_tasks n ON n.job_id = j.id WHERE j.id = %s",
    "project": "SELECT workspace_id FROM projects WHERE id = %s",
    "template": "SELECT workspace_id FROM templates WHERE name = %s",
    "workspace": "SELECT id AS workspace_id FROM workspaces WHERE id = %s",
}


def workspace_of(conn: Conn, kind: str, key: object) -> int | None:
    """The workspace of the experiment, trial, interactive task, job, project, template or
    workspace ``key``; None when it does not exist (or, for an experiment, its project is
    gone)."""
    return db.scalar(conn, int, _WORKSPACE_OF[kind], (key,))


def private_workspace_of(conn: Conn, kind: str, key: object) -> int | None:
    """The workspace of ``key`` (as :func:`workspace_of`) when it is private, else None: one
    statement, for read checks that cost nothing more while a workspace is open."""
    return db.scalar(
        conn,
        int,
        f"SELECT x.workspace_id FROM ({_WORKSPACE_OF[kind]}) x"
        " JOIN workspaces w ON w.id = x.workspace_id WHERE w.private",
        (key,),
    )


def readable_workspaces(
    conn: Conn, user_id: int, admin: bool, *, private: bool | None = None
) -> list[int] | None:
    """The workspaces the user may read; None: all of them (an admin, a cluster-wide role, or
    a cluster with no private workspace: one short statement then, or none when the caller
    read :data:`ANY_PRIVATE` already and passes it as ``private``)."""
    if admin or not (any_private(conn) if private is None else private):
        return None
    if db.exists(
        conn,
        "SELECT 1 FROM role_assignments a WHERE a.workspace_id IS NULL AND (a.user_id = %(u)s"
        " OR a.group_id IN (SELECT group_id FROM user_group_members WHERE user_id = %(u)s))"
        " LIMIT 1",
        {"u": user_id},
    ):
        return None
    return db.column(
        conn,
        int,
        "SELECT w.id FROM workspaces w WHERE w.owner_id = %(u)s"
        " OR NOT w.private"
        " OR EXISTS (SELECT 1 FROM role_assignments a WHERE a.workspace_id = w.id"
        "   AND (a.user_id = %(u)s OR a.group_id IN"
        "        (SELECT group_id FROM user_group_members WHERE user_id = %(u)s)))",
        {"u": user_id},
    )


def scope_roles(roles: Iterable[Role]) -> list[str]:
    return [r.value for r in roles]
