"""``/api/v1/templates``: configuration templates (``det template …``).

Every user reads and applies every template; its owner or an admin changes it."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, request

from det.master.api import _access
from det.master.api._common import (
    any_json,
    body,
    current_user,
    db,
    int_arg,
    int_list_arg,
    pagination,
)
from det.master.api.workspaces import order_desc, sort_arg
from det.master.errors import InvalidArgument
from det.master.services import templates as svc

bp = Blueprint("templates", __name__)


@bp.get("/api/v1/templates")
def list_() -> Any:
    offset = int_arg("offset", 0) or 0
    limit = int_arg("limit", 0) or 0
    sort_arg(("SORT_BY_UNSPECIFIED", "SORT_BY_NAME"))
    with db() as conn:
        rows, total = svc.list_(
            conn,
            name=request.args.get("name") or None,
            workspace_ids=int_list_arg("workspaceIds"),
            order_desc=order_desc(),
            offset=offset,
            limit=limit,
        )
    return {
        "templates": [svc.template_json(r) for r in rows],
        "pagination": pagination(offset, limit, total),
    }


@bp.get("/api/v1/templates/<name>")
def get(name: str) -> Any:
    with db() as conn:
        return {"template": svc.template_json(svc.get(conn, name))}


@bp.post("/api/v1/templates/<name>")
def create(name: str) -> Any:
    data = body()
    with db() as conn:
        row = svc.create(conn, current_user().id, name, data)
    return {"template": svc.template_json(row)}


@bp.put("/api/v1/templates/<name>")
def put(name: str) -> Any:
    data = body()
    with db() as conn:
        if conn.execute("SELECT 1 FROM templates WHERE name = %s", (name,)).fetchone():
            _access.template(conn, name)
        row = svc.put(conn, current_user().id, name, data)
    return {"template": svc.template_json(row)}


@bp.patch("/api/v1/templates/<name>")
def patch_config(name: str) -> Any:
    """Determined's client sends the new config itself as the body."""
    config = any_json()
    if not isinstance(config, dict):
        raise InvalidArgument("request body: the template's config as a JSON object")
    with db() as conn:
        _access.template(conn, name)
        row = svc.set_config(conn, name, config)
    return {"template": svc.template_json(row)}


@bp.delete("/api/v1/templates/<name>")
def delete(name: str) -> Any:
    with db() as conn:
        _access.template(conn, name)
        svc.delete(conn, name)
    return {}


@bp.patch("/api/v1/template/rename")
def rename() -> Any:
    data = body()
    old, new = data.get("oldName"), data.get("newName")
    if not isinstance(old, str) or not old:
        raise InvalidArgument("oldName: required string")
    if not isinstance(new, str) or not new:
        raise InvalidArgument("newName: required string")
    with db() as conn:
        _access.template(conn, old)
        row = svc.rename(conn, old, new)
    return {"template": svc.template_json(row)}
