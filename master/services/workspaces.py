"""Workspaces: named collections of projects (Determined's open-source edition).

The default workspace "Uncategorized" (id 1) is immutable: it cannot be renamed, archived or
deleted. Deleting a workspace deletes its projects and their experiments (experiments through
:func:`det.master.services.experiments.delete`, so their checkpoints are collected) and its
templates; it is refused while one of its experiments is still running or a model lives in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from det.common.jsontypes import JSONObject
from det.master import db, limits
from det.master.db import Conn
from det.master.errors import Conflict, InvalidArgument, NotFound
from det.master.rows.workspaces import Workspace
from det.master.schemas import d
from det.master.services import listing
from det.master.wire import Paging

DEFAULT_ID = 1


@dataclass(frozen=True, slots=True)
class Owned:
    """A workspace's or a project's own row as a change reads it (:func:`lock`)."""

    id: int
    name: str
    immutable: bool
    archived: bool
    #: The workspace it is in: a project's, or a workspace's own id.
    workspace_id: int


_SELECT = (
    "SELECT w.id, w.name, w.archived, w.immutable, w.owner_id, w.default_compute_pool,"
    " w.default_aux_pool, w.checkpoint_storage, w.agent_user_group, w.created_at,"
    " coalesce(w.owner_id, 1) AS user_id, coalesce(u.username, 'admin') AS username,"
    " (SELECT count(*) FROM projects p WHERE p.workspace_id = w.id) AS num_projects,"
    " (SELECT count(*) FROM experiments e JOIN projects p ON p.id = e.project_id"
    "  WHERE p.workspace_id = w.id AND NOT e.deleted) AS num_experiments"
    " FROM workspaces w LEFT JOIN users u ON u.id = coalesce(w.owner_id, 1)"
)


def _rows(conn: Conn) -> psycopg.Cursor[Workspace]:
    return conn.cursor(row_factory=class_row(Workspace))


def get(conn: Conn, workspace_id: int) -> Workspace:
    row = _rows(conn).execute(_SELECT + " WHERE w.id = %s", (workspace_id,)).fetchone()
    if row is None:
        raise NotFound(f"workspace {workspace_id} not found")
    return row


def by_name(conn: Conn, name: str) -> Workspace:
    row = _rows(conn).execute(_SELECT + " WHERE w.name = %s", (name,)).fetchone()
    if row is None:
        raise NotFound(f"workspace '{name}' not found")
    return row


_SORTS = {"SORT_BY_NAME": "w.name", "SORT_BY_ID": "w.id"}


def list_(
    conn: Conn, params: d.GetWorkspacesParams, readable: list[int] | None = None
) -> tuple[list[Workspace], int]:
    """Determined's GetWorkspaces (without ``pinned``, which the route answers); only the
    ``readable`` ones when given (det.master.authz.readable_workspaces)."""
    where, args = owned_filters("w", params)
    if readable is not None:
        where.append("w.id = ANY(%s)")
        args.append(readable)
    if params.get("name"):
        # Determined's ``name`` is a case-insensitive match; ``nameCaseSensitive`` is exact.
        where.append("lower(w.name) = lower(%s)")
        args.append(params.get("name"))
    if params.get("nameCaseSensitive"):
        where.append("w.name = %s")
        args.append(params.get("nameCaseSensitive"))
    order = f"{_SORTS.get(params.get('sortBy') or '', 'w.id')} {direction(params)}"
    rows = (
        _rows(conn)
        .execute(_SELECT + " WHERE " + " AND ".join(where) + f" ORDER BY {order}, w.id", args)
        .fetchall()
    )
    return listing.page(rows, *Paging.of(params))


# The list queries of workspaces and of a workspace's projects: the same filters and order.
OwnedList = d.GetWorkspacesParams | d.GetWorkspaceProjectsParams


def owned_filters(alias: str, params: OwnedList) -> tuple[list[str], list[Any]]:
    """The filters workspace and project lists share (``alias`` is the listed table's): archived
    or not, and made by these users (by name or id; no owner is the admin's)."""
    where: list[str] = ["true"]
    args: list[Any] = []
    if params.get("archived") is not None:
        where.append(f"{alias}.archived = %s")
        args.append(params.get("archived"))
    if params.get("users"):
        where.append("coalesce(u.username, 'admin') = ANY(%s)")
        args.append(params.get("users"))
    if params.get("userIds"):
        where.append(f"coalesce({alias}.owner_id, 1) = ANY(%s)")
        args.append(params.get("userIds"))
    return where, args


def direction(params: OwnedList) -> str:
    return "DESC" if params.get("orderBy") == "ORDER_BY_DESC" else "ASC"


def _pool(field: str, value: Any) -> str:
    return limits.text(field, value, limits.NAME)


def _storage(value: Any) -> JSONObject | None:
    """A workspace's checkpoint storage: an object, or ``{}`` to clear it."""
    if value is None:
        return None
    stored = limits.json_object("checkpointStorageConfig", value)
    return stored or None


def _agent_user_group(value: d.v1AgentUserGroup | None) -> d.v1AgentUserGroup | None:
    """Its fields' types are checked with the request; only the names' lengths are det's."""
    if value is None:
        return None
    for key in ("agentUser", "agentGroup"):
        if value.get(key) is not None:
            limits.text(f"agentUserGroup.{key}", value.get(key), limits.NAME)
    return value


def create(conn: Conn, owner_id: int, data: d.v1PostWorkspaceRequest) -> Workspace:
    name = limits.text("name", data.get("name"), limits.NAME, required=True)
    workspace_id = db.scalar(
        conn,
        int,
        "INSERT INTO workspaces (name, owner_id, default_compute_pool, default_aux_pool,"
        " checkpoint_storage, agent_user_group) VALUES (%s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (name) DO NOTHING RETURNING id",
        (
            name,
            owner_id,
            _pool("defaultComputePool", data.get("defaultComputePool")),
            _pool("defaultAuxPool", data.get("defaultAuxPool")),
            Jsonb(_storage(data.get("checkpointStorageConfig"))),
            Jsonb(_agent_user_group(data.get("agentUserGroup"))),
        ),
    )
    if workspace_id is None:
        raise Conflict(f"workspace '{name}' already exists")
    return get(conn, workspace_id)


def lock(conn: Conn, table: Literal["workspaces", "projects"], row_id: int) -> Owned:
    """A workspace's or project's own row, locked against concurrent changes."""
    workspace = "workspace_id" if table == "projects" else "id AS workspace_id"
    row = (
        conn.cursor(row_factory=class_row(Owned))
        .execute(
            f"SELECT id, name, immutable, archived, {workspace} FROM {table}"
            " WHERE id = %s FOR NO KEY UPDATE",
            (row_id,),
        )
        .fetchone()
    )
    if row is None:
        raise NotFound(f"{table[:-1]} {row_id} not found")
    return row


def refuse_default(row: Owned, noun: str, what: str) -> None:
    """The default ("Uncategorized") workspace and project cannot be renamed, archived, moved
    or deleted."""
    if row.immutable:
        raise Conflict(f"{noun} '{row.name}' is the default {noun}: it cannot be {what}")


def patch(conn: Conn, workspace_id: int, data: d.v1PatchWorkspace) -> Workspace:
    row = lock(conn, "workspaces", workspace_id)
    if data.get("name") is not None:
        name = limits.text("name", data["name"], limits.NAME, required=True)
        if name != row.name:
            refuse_default(row, "workspace", "renamed")
            taken = conn.execute("SELECT 1 FROM workspaces WHERE name = %s", (name,)).fetchone()
            if taken is not None:
                raise Conflict(f"workspace '{name}' already exists")
            conn.execute("UPDATE workspaces SET name = %s WHERE id = %s", (name, workspace_id))
    pools = (
        ("default_compute_pool", "defaultComputePool", data.get("defaultComputePool")),
        (
            "default_compute_pool",
            "defaultComputeResourcePool",
            data.get("defaultComputeResourcePool"),
        ),
        ("default_aux_pool", "defaultAuxPool", data.get("defaultAuxPool")),
        ("default_aux_pool", "defaultAuxResourcePool", data.get("defaultAuxResourcePool")),
    )
    for column, key, value in pools:
        if value is not None:
            conn.execute(
                f"UPDATE workspaces SET {column} = %s WHERE id = %s",
                (_pool(key, value), workspace_id),
            )
    if data.get("checkpointStorageConfig") is not None:
        conn.execute(
            "UPDATE workspaces SET checkpoint_storage = %s WHERE id = %s",
            (Jsonb(_storage(data["checkpointStorageConfig"])), workspace_id),
        )
    if data.get("agentUserGroup") is not None:
        conn.execute(
            "UPDATE workspaces SET agent_user_group = %s WHERE id = %s",
            (Jsonb(_agent_user_group(data["agentUserGroup"])), workspace_id),
        )
    return get(conn, workspace_id)


def set_archived(conn: Conn, workspace_id: int, archived: bool) -> None:
    row = lock(conn, "workspaces", workspace_id)
    refuse_default(row, "workspace", "archived")
    conn.execute("UPDATE workspaces SET archived = %s WHERE id = %s", (archived, workspace_id))


def named(conn: Conn, workspace_id: int | None, workspace_name: str | None = None) -> int | None:
    """The usable workspace a request names by id or by name, None when it names none
    (Determined's clients send 0 and "" for none)."""
    if workspace_id:
        return int(usable(conn, workspace_id)["id"])
    if workspace_name:
        limits.text("workspaceName", workspace_name, limits.NAME)
        try:
            row = by_name(conn, workspace_name)
        except NotFound:
            raise InvalidArgument(f"workspaceName: no workspace named {workspace_name!r}") from None
        return int(usable(conn, row["id"])["id"])
    return None


def usable(conn: Conn, workspace_id: int) -> Workspace:
    """The workspace, refused when archived (nothing new goes into an archived workspace)."""
    row = get(conn, workspace_id)
    if row["archived"]:
        raise Conflict(f"workspace '{row['name']}' is archived")
    return row
