"""Resource pools bound to workspaces, as in Determined: a pool bound to no workspace is shared
by all of them; a pool bound to some is for those only. A workspace's tasks (experiments,
commands, notebooks, shells, TensorBoards) may use the pools available to it; a refusal names
the pool and the workspace. A workspace's default compute (aux) pool, when set, is where its
experiments (other tasks) go when their config names no pool; it must be available to it.
"""

from __future__ import annotations

from typing import Any

from det.master import db
from det.master.db import Conn
from det.master.errors import InvalidArgument, NotFound
from det.master.handles import MasterState


def pool_names(st: MasterState) -> list[str]:
    return [p.pool_name for p in st.config.resource_pools]


def _pool(st: MasterState, pool: str) -> str:
    if st.config.pool(pool) is None:
        raise NotFound(f"resource pool '{pool}' not found (pools: {', '.join(pool_names(st))})")
    return pool


def workspace_ids(conn: Conn, ids: list[Any] | None, names: list[str] | None) -> list[int]:
    """The workspaces a binding request names (ids and names), each checked to exist."""
    out: list[int] = []
    for i, raw in enumerate(ids or []):
        try:
            wid = int(raw)
        except (TypeError, ValueError):
            raise InvalidArgument(f"workspaceIds[{i}]: not an id ({raw!r})") from None
        if not db.exists(conn, "SELECT 1 FROM workspaces WHERE id = %s", (wid,)):
            raise NotFound(f"workspaceIds[{i}]: no workspace {wid}")
        out.append(wid)
    for i, name in enumerate(names or []):
        found = db.scalar(conn, int, "SELECT id FROM workspaces WHERE name = %s", (name,))
        if found is None:
            raise NotFound(f"workspaceNames[{i}]: no workspace named {name!r}")
        out.append(found)
    if not out:
        raise InvalidArgument("workspaceIds: name at least one workspace (ids or names)")
    return list(dict.fromkeys(out))


def bound(conn: Conn, pool: str) -> list[int]:
    return db.column(
        conn,
        int,
        "SELECT workspace_id FROM pool_workspace_bindings WHERE pool = %s ORDER BY workspace_id",
        (pool,),
    )


def bind(conn: Conn, st: MasterState, pool: str, ids: list[int]) -> None:
    _pool(st, pool)
    for wid in ids:
        conn.execute(
            "INSERT INTO pool_workspace_bindings (pool, workspace_id) VALUES (%s, %s)"
            " ON CONFLICT DO NOTHING",
            (pool, wid),
        )


def unbind(conn: Conn, st: MasterState, pool: str, ids: list[int]) -> None:
    _pool(st, pool)
    for wid in ids:
        cur = conn.execute(
            "DELETE FROM pool_workspace_bindings WHERE pool = %s AND workspace_id = %s",
            (pool, wid),
        )
        if cur.rowcount == 0:
            raise NotFound(f"resource pool '{pool}' is not bound to workspace {wid}")


def overwrite(conn: Conn, st: MasterState, pool: str, ids: list[int]) -> None:
    _pool(st, pool)
    conn.execute("DELETE FROM pool_workspace_bindings WHERE pool = %s", (pool,))
    bind(conn, st, pool, ids)


def available(conn: Conn, st: MasterState, workspace_id: int) -> list[str]:
    """The pools workspace ``workspace_id`` may use, in the config's order."""
    closed = set(
        db.column(
            conn,
            str,
            "SELECT pool FROM pool_workspace_bindings GROUP BY pool"
            " HAVING NOT bool_or(workspace_id = %s)",
            (workspace_id,),
        )
    )
    return [p for p in pool_names(st) if p not in closed]


def _workspace_name(conn: Conn, workspace_id: int) -> str:
    name = db.scalar(conn, str, "SELECT name FROM workspaces WHERE id = %s", (workspace_id,))
    return name if name is not None else str(workspace_id)


def check(conn: Conn, st: MasterState, pool: str, workspace_id: int, field: str) -> None:
    """Refuse ``pool`` for a task of workspace ``workspace_id`` when the pool is bound to other
    workspaces only (InvalidArgument naming both)."""
    ids = bound(conn, pool)
    if ids and workspace_id not in ids:
        name = _workspace_name(conn, workspace_id)
        usable = ", ".join(available(conn, st, workspace_id)) or "none"
        raise InvalidArgument(
            f"{field}: resource pool '{pool}' is bound to other workspaces; workspace"
            f" '{name}' may not use it (its pools: {usable})"
        )


def default_pool(conn: Conn, workspace_id: int | None, *, aux: bool) -> str | None:
    """The workspace's default compute (or aux) pool, None when it sets none."""
    if workspace_id is None:
        return None
    column = "default_aux_pool" if aux else "default_compute_pool"
    pool = db.scalar(
        conn, str, f"SELECT {column} AS pool FROM workspaces WHERE id = %s", (workspace_id,)
    )
    return pool or None


def check_defaults(
    conn: Conn, st: MasterState, workspace_id: int, compute: str | None, aux: str | None
) -> None:
    """A workspace's default pools must exist and be available to it."""
    for field, pool in (("defaultComputePool", compute), ("defaultAuxPool", aux)):
        if not pool:
            continue
        if st.config.pool(pool) is None:
            raise InvalidArgument(
                f"{field}: no pool named '{pool}' (pools: {', '.join(pool_names(st))})"
            )
        check(conn, st, pool, workspace_id, field)
