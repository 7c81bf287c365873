"""Workspaces: named collections of projects (Determined's open-source edition).

The default workspace "Uncategorized" (id 1) is immutable: it cannot be renamed, archived or
deleted. Deleting a workspace deletes its projects and their experiments (experiments through
:func:`det.master.services.experiments.delete`, so their checkpoints are collected) and its
templates; it is refused while one of its experiments is still running or a model lives in it.
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from det.master import limits
from det.master.db import Conn
from det.master.errors import Conflict, InvalidArgument, NotFound

DEFAULT_ID = 1

_SELECT = (
    "SELECT w.*, coalesce(w.owner_id, 1) AS user_id, coalesce(u.username, 'admin') AS username,"
    " (SELECT count(*) FROM projects p WHERE p.workspace_id = w.id) AS num_projects,"
    " (SELECT count(*) FROM experiments e JOIN projects p ON p.id = e.project_id"
    "  WHERE p.workspace_id = w.id AND NOT e.deleted) AS num_experiments"
    " FROM workspaces w LEFT JOIN users u ON u.id = coalesce(w.owner_id, 1)"
)


def workspace_json(r: dict[str, Any]) -> dict[str, Any]:
    """Determined's ``v1Workspace``."""
    out: dict[str, Any] = {
        "id": r["id"],
        "name": r["name"],
        "archived": r["archived"],
        "username": r["username"],
        "immutable": r["immutable"],
        "numProjects": int(r["num_projects"]),
        "pinned": False,
        "userId": r["user_id"],
        "numExperiments": int(r["num_experiments"]),
        "state": "WORKSPACE_STATE_UNSPECIFIED",
        "errorMessage": "",
        "checkpointStorageConfig": r["checkpoint_storage"],
        "defaultComputePool": r["default_compute_pool"],
        "defaultAuxPool": r["default_aux_pool"],
    }
    if r["agent_user_group"] is not None:
        out["agentUserGroup"] = r["agent_user_group"]
    return out


def get(conn: Conn, workspace_id: int) -> dict[str, Any]:
    row = conn.execute(_SELECT + " WHERE w.id = %s", (workspace_id,)).fetchone()
    if row is None:
        raise NotFound(f"workspace {workspace_id} not found")
    return row


def by_name(conn: Conn, name: str) -> dict[str, Any]:
    row = conn.execute(_SELECT + " WHERE w.name = %s", (name,)).fetchone()
    if row is None:
        raise NotFound(f"workspace '{name}' not found")
    return row


_SORTS = {"SORT_BY_NAME": "w.name", "SORT_BY_ID": "w.id"}


def list_(
    conn: Conn,
    *,
    name: str | None,
    name_exact: str | None,
    archived: bool | None,
    users_in: list[str] | None,
    user_ids: list[int] | None,
    sort_by: str | None,
    order_desc: bool,
    offset: int,
    limit: int,
) -> tuple[list[dict[str, Any]], int]:
    where: list[str] = ["true"]
    params: list[Any] = []
    if name:
        # Determined's ``name`` is a case-insensitive match; ``nameCaseSensitive`` is exact.
        where.append("lower(w.name) = lower(%s)")
        params.append(name)
    if name_exact:
        where.append("w.name = %s")
        params.append(name_exact)
    if archived is not None:
        where.append("w.archived = %s")
        params.append(archived)
    if users_in:
        where.append("coalesce(u.username, 'admin') = ANY(%s)")
        params.append(users_in)
    if user_ids:
        where.append("coalesce(w.owner_id, 1) = ANY(%s)")
        params.append(user_ids)
    clause = " WHERE " + " AND ".join(where)
    rows = conn.execute(
        _SELECT
        + clause
        + f" ORDER BY {_SORTS.get(sort_by or '', 'w.id')} {'DESC' if order_desc else 'ASC'}, w.id",
        params,
    ).fetchall()
    total = len(rows)
    if offset < 0:
        offset = max(0, total + offset)
    return rows[offset : (offset + limit) if limit > 0 else None], total


def _pool(field: str, value: Any) -> str:
    return limits.text(field, value, limits.NAME)


def _storage(value: Any) -> Any:
    """A workspace's checkpoint storage: an object, or ``{}`` to clear it."""
    if value is None:
        return None
    stored = limits.json_object("checkpointStorageConfig", value)
    return stored or None


def _agent_user_group(value: Any) -> Any:
    if value is None:
        return None
    group = limits.json_object("agentUserGroup", value)
    for key in ("agentUid", "agentGid"):
        if key in group and group[key] is not None and type(group[key]) is not int:
            raise InvalidArgument(f"agentUserGroup.{key}: must be an integer")
    for key in ("agentUser", "agentGroup"):
        if key in group and group[key] is not None:
            limits.text(f"agentUserGroup.{key}", group[key], limits.NAME)
    return group


def create(conn: Conn, owner_id: int, data: dict[str, Any]) -> dict[str, Any]:
    name = limits.text("name", data.get("name"), limits.NAME, required=True)
    row = conn.execute(
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
    ).fetchone()
    if row is None:
        raise Conflict(f"workspace '{name}' already exists")
    return get(conn, row["id"])


def _lock(conn: Conn, workspace_id: int) -> dict[str, Any]:
    row = conn.execute(
        "SELECT * FROM workspaces WHERE id = %s FOR NO KEY UPDATE", (workspace_id,)
    ).fetchone()
    if row is None:
        raise NotFound(f"workspace {workspace_id} not found")
    return row


def _mutable(row: dict[str, Any], what: str) -> None:
    if row["immutable"]:
        raise Conflict(f"workspace '{row['name']}' is the default workspace: it cannot be {what}")


def patch(conn: Conn, workspace_id: int, data: dict[str, Any]) -> dict[str, Any]:
    row = _lock(conn, workspace_id)
    if data.get("name") is not None:
        name = limits.text("name", data["name"], limits.NAME, required=True)
        if name != row["name"]:
            _mutable(row, "renamed")
            taken = conn.execute("SELECT 1 FROM workspaces WHERE name = %s", (name,)).fetchone()
            if taken is not None:
                raise Conflict(f"workspace '{name}' already exists")
            conn.execute("UPDATE workspaces SET name = %s WHERE id = %s", (name, workspace_id))
    for column, keys in (
        ("default_compute_pool", ("defaultComputePool", "defaultComputeResourcePool")),
        ("default_aux_pool", ("defaultAuxPool", "defaultAuxResourcePool")),
    ):
        for key in keys:
            if data.get(key) is not None:
                conn.execute(
                    f"UPDATE workspaces SET {column} = %s WHERE id = %s",
                    (_pool(key, data[key]), workspace_id),
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
    row = _lock(conn, workspace_id)
    _mutable(row, "archived")
    conn.execute("UPDATE workspaces SET archived = %s WHERE id = %s", (archived, workspace_id))


def delete(conn: Conn, workspace_id: int) -> None:
    from det.master.services import projects

    row = _lock(conn, workspace_id)
    _mutable(row, "deleted")
    model = conn.execute(
        "SELECT name FROM models WHERE workspace_id = %s ORDER BY id LIMIT 1", (workspace_id,)
    ).fetchone()
    if model is not None:
        raise Conflict(
            f"workspace '{row['name']}' holds model '{model['name']}': move or delete its models"
            " first"
        )
    for p in conn.execute(
        "SELECT id FROM projects WHERE workspace_id = %s ORDER BY id", (workspace_id,)
    ).fetchall():
        projects.delete(conn, p["id"], removing_workspace=True)
    conn.execute("DELETE FROM templates WHERE workspace_id = %s", (workspace_id,))
    conn.execute("DELETE FROM workspaces WHERE id = %s", (workspace_id,))


def usable(conn: Conn, workspace_id: int) -> dict[str, Any]:
    """The workspace, refused when archived (nothing new goes into an archived workspace)."""
    row = get(conn, workspace_id)
    if row["archived"]:
        raise Conflict(f"workspace '{row['name']}' is archived")
    return row
