"""User groups and role assignments: the rows :mod:`det.master.authz` reads.

A group has a unique name and members (users); a role assignment gives one role of
:class:`det.master.authz.Role` to one user or one group on one workspace or (``workspace_id``
None) the cluster. ClusterAdmin is the users' ``admin`` flag itself (assigning it sets the flag,
removing it clears it), so the admin-only routes, which read the flag, and the role table agree. Who may write them is the API's to check (``workspace.assign`` on the
workspace, ``cluster.assign`` for cluster assignments and groups).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from psycopg.rows import class_row

from det.master import authz, db, limits
from det.master.db import Conn
from det.master.errors import Conflict, InvalidArgument, NotFound


@dataclasses.dataclass(frozen=True, slots=True)
class Group:
    id: int
    name: str
    members: int


@dataclasses.dataclass(frozen=True, slots=True)
class Assignment:
    role: str
    user_id: int | None
    group_id: int | None
    workspace_id: int | None


def _user_ids(conn: Conn, field: str, ids: list[Any] | None) -> list[int]:
    out = []
    for i, raw in enumerate(ids or []):
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise InvalidArgument(f"{field}[{i}]: not a user id ({raw!r})")
        if conn.execute("SELECT 1 FROM users WHERE id = %s", (raw,)).fetchone() is None:
            raise NotFound(f"{field}[{i}]: no user {raw}")
        out.append(raw)
    return out


def get_group(conn: Conn, group_id: int) -> Group:
    row = (
        conn.cursor(row_factory=class_row(Group))
        .execute(
            "SELECT g.id, g.name, (SELECT count(*) FROM user_group_members m"
            " WHERE m.group_id = g.id)::int AS members FROM user_groups g WHERE g.id = %s",
            (group_id,),
        )
        .fetchone()
    )
    if row is None:
        raise NotFound(f"user group {group_id} not found")
    return row


def group_by_name(conn: Conn, name: str) -> Group:
    group_id = db.scalar(conn, int, "SELECT id FROM user_groups WHERE name = %s", (name,))
    if group_id is None:
        raise NotFound(f"no user group named {name!r}")
    return get_group(conn, group_id)


def members(conn: Conn, group_id: int) -> list[int]:
    return db.column(
        conn,
        int,
        "SELECT user_id FROM user_group_members WHERE group_id = %s ORDER BY user_id",
        (group_id,),
    )


def list_groups(conn: Conn, user_id: int | None = None, name: str | None = None) -> list[Group]:
    """Every group (those ``user_id`` belongs to, the one named ``name``), by name."""
    where: list[str] = ["true"]
    args: list[Any] = []
    if user_id:
        where.append("EXISTS (SELECT 1 FROM user_group_members m WHERE m.group_id = g.id"
                     " AND m.user_id = %s)")  # fmt: skip
        args.append(user_id)
    if name:
        where.append("g.name = %s")
        args.append(name)
    return (
        conn.cursor(row_factory=class_row(Group))
        .execute(
            "SELECT g.id, g.name, (SELECT count(*) FROM user_group_members m"
            " WHERE m.group_id = g.id)::int AS members FROM user_groups g WHERE "
            + " AND ".join(where)
            + " ORDER BY g.name",
            args,
        )
        .fetchall()
    )


def create_group(conn: Conn, name: Any, add_users: list[Any] | None) -> Group:
    name = limits.text("name", name, limits.NAME, required=True)
    users = _user_ids(conn, "addUsers", add_users)
    group_id = db.scalar(
        conn,
        int,
        "INSERT INTO user_groups (name) VALUES (%s) ON CONFLICT (name) DO NOTHING RETURNING id",
        (name,),
    )
    if group_id is None:
        raise Conflict(f"user group {name!r} already exists")
    _add(conn, group_id, users)
    return get_group(conn, group_id)


def _add(conn: Conn, group_id: int, users: list[int]) -> None:
    for uid in users:
        conn.execute(
            "INSERT INTO user_group_members (group_id, user_id) VALUES (%s, %s)"
            " ON CONFLICT DO NOTHING",
            (group_id, uid),
        )


def update_group(
    conn: Conn,
    group_id: int,
    name: Any = None,
    add_users: list[Any] | None = None,
    remove_users: list[Any] | None = None,
) -> Group:
    get_group(conn, group_id)
    if name:
        name = limits.text("name", name, limits.NAME, required=True)
        taken = conn.execute(
            "SELECT 1 FROM user_groups WHERE name = %s AND id <> %s", (name, group_id)
        ).fetchone()
        if taken is not None:
            raise Conflict(f"user group {name!r} already exists")
        conn.execute("UPDATE user_groups SET name = %s WHERE id = %s", (name, group_id))
    _add(conn, group_id, _user_ids(conn, "addUsers", add_users))
    for i, uid in enumerate(_user_ids(conn, "removeUsers", remove_users)):
        cur = conn.execute(
            "DELETE FROM user_group_members WHERE group_id = %s AND user_id = %s",
            (group_id, uid),
        )
        if cur.rowcount == 0:
            raise NotFound(f"removeUsers[{i}]: user {uid} is not in user group {group_id}")
    return get_group(conn, group_id)


def delete_group(conn: Conn, group_id: int) -> None:
    get_group(conn, group_id)
    conn.execute("DELETE FROM user_groups WHERE id = %s", (group_id,))


def _target(conn: Conn, user_id: int | None, group_id: int | None) -> None:
    if (user_id is None) == (group_id is None):
        raise InvalidArgument("an assignment names one user or one group")
    if user_id is not None:
        _user_ids(conn, "userId", [user_id])
    if group_id is not None:
        get_group(conn, group_id)


def _scope(conn: Conn, role: authz.Role, workspace_id: int | None) -> None:
    if workspace_id is None:
        return
    if role is authz.Role.CLUSTER_ADMIN:
        raise InvalidArgument("ClusterAdmin is assigned on the cluster, not on a workspace")
    if conn.execute("SELECT 1 FROM workspaces WHERE id = %s", (workspace_id,)).fetchone() is None:
        raise NotFound(f"workspace {workspace_id} not found")


def _admin_flag(conn: Conn, user_id: int | None, admin: bool) -> None:
    """ClusterAdmin is the users' ``admin`` flag (the admin-only routes read it): given to a
    user, not a group; taken from any admin but the last active one."""
    if user_id is None:
        raise InvalidArgument("ClusterAdmin is the admin flag: it is given to users, not to groups")
    was_admin = db.scalar(
        conn, bool, "SELECT admin FROM users WHERE id = %s FOR UPDATE", (user_id,)
    )
    assert was_admin is not None  # _target checked it
    if not admin and not was_admin:
        raise NotFound(f"user {user_id} has no ClusterAdmin role on the cluster")
    if not admin:
        others = db.one_int(
            conn, "SELECT count(*) AS n FROM users WHERE admin AND active AND id <> %s", (user_id,)
        )
        if others == 0:
            raise Conflict(f"user {user_id} is the last active admin: the cluster would have none")
    conn.execute("UPDATE users SET admin = %s WHERE id = %s", (admin, user_id))


def assign(
    conn: Conn,
    role: authz.Role,
    *,
    user_id: int | None = None,
    group_id: int | None = None,
    workspace_id: int | None = None,
) -> None:
    """Gives ``role`` to the user or group on the workspace (None: the cluster), which makes the
    workspace private for good; assigning it again changes nothing."""
    _target(conn, user_id, group_id)
    _scope(conn, role, workspace_id)
    if role is authz.Role.CLUSTER_ADMIN:
        _admin_flag(conn, user_id, True)
        return
    conn.execute(
        "INSERT INTO role_assignments (role, user_id, group_id, workspace_id)"
        " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (role.value, user_id, group_id, workspace_id),
    )
    if workspace_id is not None:  # a private team space from now on (det.master.authz)
        conn.execute("UPDATE workspaces SET private = true WHERE id = %s", (workspace_id,))


def unassign(
    conn: Conn,
    role: authz.Role,
    *,
    user_id: int | None = None,
    group_id: int | None = None,
    workspace_id: int | None = None,
) -> None:
    _target(conn, user_id, group_id)
    if role is authz.Role.CLUSTER_ADMIN:
        _admin_flag(conn, user_id, False)
        return
    cur = conn.execute(
        "DELETE FROM role_assignments WHERE role = %s AND user_id IS NOT DISTINCT FROM %s"
        " AND group_id IS NOT DISTINCT FROM %s AND workspace_id IS NOT DISTINCT FROM %s",
        (role.value, user_id, group_id, workspace_id),
    )
    if cur.rowcount == 0:
        who = f"user {user_id}" if user_id is not None else f"user group {group_id}"
        where = f"workspace {workspace_id}" if workspace_id is not None else "the cluster"
        raise NotFound(f"{who} has no {role.value} role on {where}")


def assignments(
    conn: Conn,
    *,
    user_id: int | None = None,
    group_id: int | None = None,
    workspace_id: int | None = None,
    role: authz.Role | None = None,
    with_groups_of: int | None = None,
) -> list[Assignment]:
    """Assignments, filtered: of a user, of a group, on a workspace, of a role;
    ``with_groups_of``: the user's own and their groups'."""
    where: list[str] = ["true"]
    args: list[Any] = []
    for column, value in (("user_id", user_id), ("group_id", group_id),
                          ("workspace_id", workspace_id)):  # fmt: skip
        if value is not None:
            where.append(f"{column} = %s")
            args.append(value)
    if role is not None:
        where.append("role = %s")
        args.append(role.value)
    if with_groups_of is not None:
        where.append(
            "(user_id = %s OR group_id IN"
            " (SELECT group_id FROM user_group_members WHERE user_id = %s))"
        )
        args += [with_groups_of, with_groups_of]
    return (
        conn.cursor(row_factory=class_row(Assignment))
        .execute(
            "SELECT role, user_id, group_id, workspace_id FROM role_assignments WHERE "
            + " AND ".join(where)
            + " ORDER BY id",
            args,
        )
        .fetchall()
    )


def admins(conn: Conn) -> list[Assignment]:
    """The admins' ClusterAdmin role (their flag), as assignments on the cluster."""
    return [
        Assignment(authz.Role.CLUSTER_ADMIN.value, uid, None, None)
        for uid in db.column(conn, int, "SELECT id FROM users WHERE admin ORDER BY id")
    ]
