"""Configuration templates: named partial experiment configs stored by the master.

An experiment that names a template (``template`` in the create request, or ``template:`` in
its config) gets the template merged *under* its own config
(:func:`det.master.expconf.merge_template`: the experiment's values win) before validation,
and stores the expanded config, so later changes to the template do not change it.

A template belongs to a workspace: only users with a role there list, read and apply it
(``template.view``), and one that holds secrets (storage keys, registry passwords) is applied
only by its owner, the workspace's assigned Editors (or higher) and ClusterAdmins
(``template.secrets``, :mod:`det.master.authz`); :func:`check_apply` says so.

Templates are shown with their secrets hidden (:func:`det.master.expconf.redact`); a config put
back with ``********`` where a secret was keeps the stored secret (:func:`expconf.unredact`).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from det.common.jsontypes import JSONObject
from det.master import authz, expconf, limits
from det.master.db import Conn
from det.master.errors import Conflict, InvalidArgument, NotFound
from det.master.rows.templates import Template
from det.master.schemas import d
from det.master.services import listing, workspaces
from det.master.wire import Paging

CONFIG = 256 * 1024  # bytes of a template's config as JSON


_COLUMNS = "name, config, workspace_id, owner_id, created_at"


def _rows(conn: Conn) -> psycopg.Cursor[Template]:
    return conn.cursor(row_factory=class_row(Template))


def _name(field: str, value: Any) -> str:
    return limits.text(field, value, limits.NAME, required=True)


def _config(value: Any) -> JSONObject:
    if value is None:
        raise InvalidArgument("config: required (the template's config as an object)")
    return limits.json_object("config", value, CONFIG)


def _workspace(conn: Conn, workspace_id: int | None) -> int:
    return workspaces.named(conn, workspace_id) or workspaces.DEFAULT_ID


def exists(conn: Conn, name: str) -> bool:
    return conn.execute("SELECT 1 FROM templates WHERE name = %s", (name,)).fetchone() is not None


def get(conn: Conn, name: str) -> Template:
    row = (
        _rows(conn).execute(f"SELECT {_COLUMNS} FROM templates WHERE name = %s", (name,)).fetchone()
    )
    if row is None:
        raise NotFound(f"template '{name}' not found")
    return row


def holds_secrets(config: JSONObject) -> bool:
    """Whether the config holds a secret that reading it hides (expconf.redact)."""
    return expconf.redact(config) != config


def check_apply(conn: Conn, name: str, user_id: int, admin: bool, field: str) -> Template:
    """Template ``name``, which the user may apply (InvalidArgument naming ``field`` when there
    is no such template; PermissionDenied naming the workspace and the role needed)."""
    try:
        row = get(conn, name)
    except NotFound:
        raise InvalidArgument(f"{field}: no template named {name!r}") from None
    what = f"template '{name}'"
    authz.require(
        conn, user_id, admin, "template.view", row["workspace_id"],
        owner_id=row["owner_id"], what=what,
    )  # fmt: skip
    if holds_secrets(row["config"]):
        authz.require(
            conn, user_id, admin, "template.secrets", row["workspace_id"],
            owner_id=row["owner_id"], what=what,
        )  # fmt: skip
    return row


def list_(
    conn: Conn, params: d.GetTemplatesParams, readable: list[int] | None = None
) -> tuple[list[Template], int]:
    """Determined's GetTemplates: ``name`` matches any part of a name (case-insensitive), in
    these workspaces (and in ``readable`` ones, when given), sorted by name in ``orderBy``,
    then paged."""
    where: list[str] = ["true"]
    args: list[Any] = []
    if readable is not None:
        where.append("workspace_id = ANY(%s)")
        args.append(readable)
    if params.get("name"):
        condition, arg = listing.contains("name", params.get("name") or "")
        where.append(condition)
        args.append(arg)
    if params.get("workspaceIds"):
        where.append("workspace_id = ANY(%s)")
        args.append(params.get("workspaceIds"))
    direction = "DESC" if params.get("orderBy") == "ORDER_BY_DESC" else "ASC"
    rows = (
        _rows(conn)
        .execute(
            f"SELECT {_COLUMNS} FROM templates WHERE "
            + " AND ".join(where)
            + f" ORDER BY name {direction}",
            args,
        )
        .fetchall()
    )
    return listing.page(rows, *Paging.of(params))


def create(conn: Conn, owner_id: int, name: str, data: d.v1Template) -> Template:
    _name("name", name)
    if data.get("name") not in (None, name):
        raise InvalidArgument(f"name: {data.get('name')!r} differs from the path's {name!r}")
    config = _config(data.get("config"))
    workspace_id = _workspace(conn, data.get("workspaceId"))
    row = (
        _rows(conn)
        .execute(
            "INSERT INTO templates (name, config, workspace_id, owner_id) VALUES (%s, %s, %s, %s)"
            f" ON CONFLICT (name) DO NOTHING RETURNING {_COLUMNS}",
            (name, Jsonb(config), workspace_id, owner_id),
        )
        .fetchone()
    )
    if row is None:
        raise Conflict(f"template '{name}' already exists")
    return row


def set_config(conn: Conn, name: str, config: JSONObject) -> Template:
    stored = get(conn, name)["config"]
    row = (
        _rows(conn)
        .execute(
            f"UPDATE templates SET config = %s WHERE name = %s RETURNING {_COLUMNS}",
            (Jsonb(expconf.unredact(_config(config), stored)), name),
        )
        .fetchone()
    )
    assert row is not None
    return row


def put(conn: Conn, owner_id: int, name: str, data: d.v1Template) -> Template:
    """Create or replace (Determined's PutTemplate)."""
    if not exists(conn, name):
        return create(conn, owner_id, name, data)
    if data.get("name") not in (None, name):
        raise InvalidArgument(f"name: {data.get('name')!r} differs from the path's {name!r}")
    config = expconf.unredact(_config(data.get("config")), get(conn, name)["config"])
    workspace_id = _workspace(conn, data.get("workspaceId"))
    row = (
        _rows(conn)
        .execute(
            "UPDATE templates SET config = %s, workspace_id = %s WHERE name = %s"
            f" RETURNING {_COLUMNS}",
            (Jsonb(config), workspace_id, name),
        )
        .fetchone()
    )
    assert row is not None
    return row


def rename(conn: Conn, old: str, new: str) -> Template:
    get(conn, old)
    _name("newName", new)
    if conn.execute("SELECT 1 FROM templates WHERE name = %s", (new,)).fetchone() is not None:
        raise Conflict(f"template '{new}' already exists")
    row = (
        _rows(conn)
        .execute(f"UPDATE templates SET name = %s WHERE name = %s RETURNING {_COLUMNS}", (new, old))
        .fetchone()
    )
    assert row is not None
    return row


def delete(conn: Conn, name: str) -> None:
    get(conn, name)
    conn.execute("DELETE FROM templates WHERE name = %s", (name,))
