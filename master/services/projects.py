"""Projects: named collections of experiments inside a workspace.

The default project "Uncategorized" (id 1, in workspace 1) is immutable. A project's ``key``
is unique across the cluster (Determined's: up to 5 letters or digits, generated from the name
when not given). Deleting a project deletes its experiments (marked deleted, their checkpoints
collected) and is refused while one of them has not finished.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from det.master import db, limits
from det.master.db import Conn
from det.master.errors import Conflict, InvalidArgument, NotFound, PayloadTooLarge
from det.master.rows.workspaces import Project
from det.master.schemas import d
from det.master.services import listing, workspaces
from det.master.wire import Paging

DEFAULT_ID = 1
KEY_LENGTH = 5


_SELECT = (
    "SELECT p.id, p.workspace_id, p.name, p.key, p.description, p.notes, p.archived,"
    " p.immutable, p.owner_id, p.created_at, w.name AS workspace_name, w.archived AS workspace_archived,"
    " coalesce(p.owner_id, 1) AS user_id, coalesce(u.username, 'admin') AS username,"
    " (SELECT count(*) FROM experiments e WHERE e.project_id = p.id AND NOT e.deleted)"
    "  AS num_experiments,"
    " (SELECT count(*) FROM experiments e WHERE e.project_id = p.id AND NOT e.deleted"
    "  AND e.state = 'ACTIVE') AS num_active_experiments,"
    " (SELECT count(*) FROM trials t JOIN experiments e ON e.id = t.experiment_id"
    "  WHERE e.project_id = p.id AND NOT e.deleted) AS num_runs,"
    " (SELECT max(e.created_at) FROM experiments e WHERE e.project_id = p.id AND NOT e.deleted)"
    "  AS last_experiment_at"
    " FROM projects p JOIN workspaces w ON w.id = p.workspace_id"
    " LEFT JOIN users u ON u.id = coalesce(p.owner_id, 1)"
)


def _rows(conn: Conn) -> psycopg.Cursor[Project]:
    return conn.cursor(row_factory=class_row(Project))


def get(conn: Conn, project_id: int) -> Project:
    row = _rows(conn).execute(_SELECT + " WHERE p.id = %s", (project_id,)).fetchone()
    if row is None:
        raise NotFound(f"project {project_id} not found")
    return row


def by_key(conn: Conn, key: str) -> Project:
    row = _rows(conn).execute(_SELECT + " WHERE p.key = %s", (key.upper(),)).fetchone()
    if row is None:
        raise NotFound(f"project with key '{key}' not found")
    return row


def by_names(conn: Conn, workspace_name: str, project_name: str) -> Project:
    row = (
        _rows(conn)
        .execute(_SELECT + " WHERE w.name = %s AND p.name = %s", (workspace_name, project_name))
        .fetchone()
    )
    if row is None:
        raise NotFound(f"project '{project_name}' not found in workspace '{workspace_name}'")
    return row


_SORTS = {
    "SORT_BY_NAME": "p.name",
    "SORT_BY_DESCRIPTION": "p.description",
    "SORT_BY_CREATION_TIME": "p.created_at",
    "SORT_BY_LAST_EXPERIMENT_START_TIME": "last_experiment_at",
    "SORT_BY_ID": "p.id",
}


def list_(
    conn: Conn,
    workspace_id: int,
    params: d.GetWorkspaceProjectsParams,
    readable: list[int] | None = None,
) -> tuple[list[Project], int]:
    """A workspace's projects (every workspace's for ``workspace_id`` 0, as Determined; only
    those of ``readable`` workspaces when given)."""
    where, args = workspaces.owned_filters("p", params)
    if readable is not None:
        where.append("p.workspace_id = ANY(%s)")
        args.append(readable)
    if workspace_id:
        where.append("p.workspace_id = %s")
        args.append(workspace_id)
    if params.get("name"):
        where.append("p.name = %s")
        args.append(params.get("name"))
    order = _SORTS.get(params.get("sortBy") or "", "p.id")
    rows = (
        _rows(conn)
        .execute(
            _SELECT
            + " WHERE "
            + " AND ".join(where)
            + f" ORDER BY {order} {workspaces.direction(params)} NULLS LAST, p.id",
            args,
        )
        .fetchall()
    )
    return listing.page(rows, *Paging.of(params))


_KEY_RE = re.compile(rf"^[A-Za-z0-9]{{1,{KEY_LENGTH}}}$")


def _key(conn: Conn, given: Any, name: str, *, current_id: int | None = None) -> str:
    if given is not None and given != "":
        key = limits.text("key", given, KEY_LENGTH * 4)
        if not _KEY_RE.match(key):
            raise InvalidArgument(f"key: 1 to {KEY_LENGTH} letters or digits, got {key!r}")
        key = key.upper()
        owner = db.scalar(conn, int, "SELECT id FROM projects WHERE key = %s", (key,))
        if owner is not None and owner != current_id:
            raise Conflict(f"project key '{key}' is already taken")
        return key
    base = ("".join(c for c in name if c.isascii() and c.isalnum()).upper() or "P")[:KEY_LENGTH]
    for n in range(10**KEY_LENGTH):
        suffix = "" if n == 0 else str(n)
        key = base[: KEY_LENGTH - len(suffix)] + suffix
        if not db.exists(conn, "SELECT 1 FROM projects WHERE key = %s", (key,)):
            return key
    raise Conflict("no free project key: pass one with key")  # pragma: no cover


def create(conn: Conn, owner_id: int, workspace_id: int, data: d.v1PostProjectRequest) -> Project:
    name = limits.text("name", data.get("name"), limits.NAME, required=True)
    description = limits.text("description", data.get("description"), limits.DESCRIPTION)
    if "workspaceId" in data and data["workspaceId"] not in (None, workspace_id):
        raise InvalidArgument(
            f"workspaceId: {data['workspaceId']!r} differs from the path's {workspace_id}"
        )
    workspaces.usable(conn, workspace_id)
    conn.execute("SELECT id FROM workspaces WHERE id = %s FOR KEY SHARE", (workspace_id,))
    key = _key(conn, data.get("key"), name)
    project_id = db.scalar(
        conn,
        int,
        "INSERT INTO projects (workspace_id, name, key, description, owner_id)"
        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING id",
        (workspace_id, name, key, description, owner_id),
    )
    if project_id is None:
        raise Conflict(f"project '{name}' already exists in this workspace")
    return get(conn, project_id)


def _lock(conn: Conn, project_id: int) -> workspaces.Owned:
    return workspaces.lock(conn, "projects", project_id)


def _mutable(row: workspaces.Owned, what: str) -> None:
    workspaces.refuse_default(row, "project", what)


def patch(conn: Conn, project_id: int, data: d.v1PatchProject) -> Project:
    row = _lock(conn, project_id)
    if data.get("name") is not None:
        name = limits.text("name", data["name"], limits.NAME, required=True)
        if name != row.name:
            _mutable(row, "renamed")
            taken = conn.execute(
                "SELECT 1 FROM projects WHERE workspace_id = %s AND name = %s",
                (row.workspace_id, name),
            ).fetchone()
            if taken is not None:
                raise Conflict(f"project '{name}' already exists in this workspace")
            conn.execute("UPDATE projects SET name = %s WHERE id = %s", (name, project_id))
    if data.get("description") is not None:
        description = limits.text("description", data["description"], limits.DESCRIPTION)
        conn.execute(
            "UPDATE projects SET description = %s WHERE id = %s", (description, project_id)
        )
    if data.get("key") is not None:
        key = _key(conn, data["key"], row.name, current_id=project_id)
        conn.execute("UPDATE projects SET key = %s WHERE id = %s", (key, project_id))
    return get(conn, project_id)


@dataclass(frozen=True, slots=True)
class _Archived:
    name: str
    archived: bool


def set_archived(conn: Conn, project_id: int, archived: bool) -> None:
    row = _lock(conn, project_id)
    _mutable(row, "archived")
    if not archived:
        ws = db.fetch_row(
            conn,
            _Archived,
            "SELECT name, archived FROM workspaces WHERE id = %s",
            (row.workspace_id,),
        )
        if ws is not None and ws.archived:
            raise Conflict(f"workspace '{ws.name}' is archived: unarchive it first")
    conn.execute("UPDATE projects SET archived = %s WHERE id = %s", (archived, project_id))


def move(conn: Conn, project_id: int, workspace_id: int) -> None:
    row = _lock(conn, project_id)
    _mutable(row, "moved")
    dest = workspaces.usable(conn, workspace_id)
    if workspace_id == row.workspace_id:
        return
    taken = conn.execute(
        "SELECT 1 FROM projects WHERE workspace_id = %s AND name = %s",
        (workspace_id, row.name),
    ).fetchone()
    if taken is not None:
        raise Conflict(f"workspace '{dest['name']}' already has a project '{row.name}'")
    conn.execute("UPDATE projects SET workspace_id = %s WHERE id = %s", (workspace_id, project_id))


def usable(conn: Conn, project_id: int) -> Project:
    """The project, refused when it or its workspace is archived."""
    row = get(conn, project_id)
    if row["archived"]:
        raise Conflict(f"project '{row['name']}' is archived")
    if row["workspace_archived"]:
        raise Conflict(f"workspace '{row['workspace_name']}' is archived")
    return row


NOTES = 100  # notes per project


def set_notes(conn: Conn, project_id: int, notes: list[d.v1Note]) -> list[d.v1Note]:
    """Replace the project's notes (each one's fields are checked with the request); the
    notes as stored, each with its name and contents."""
    if len(notes) > NOTES:
        raise InvalidArgument(f"notes: {len(notes)} notes, the limit is {NOTES}")
    stored: list[d.v1Note] = [
        {"name": n.get("name") or "", "contents": n.get("contents") or ""} for n in notes
    ]
    size = sum(len(n.get("contents") or "") for n in stored)
    if size > limits.NOTES:
        raise PayloadTooLarge(f"notes: {size} characters in all, the limit is {limits.NOTES}")
    conn.execute("UPDATE projects SET notes = %s WHERE id = %s", (Jsonb(stored), project_id))
    return stored
