"""``/api/v1/workspaces``: workspaces and the projects in them.

Every user reads every workspace; its owner or an admin changes it (:mod:`._access`). Any user
may create a workspace, and a project in any workspace that is not archived."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, request

from det.master.api import _access
from det.master.api._common import body, current_user, db, int_arg, int_list_arg, pagination
from det.master.errors import InvalidArgument, Unimplemented
from det.master.services import projects as project_svc
from det.master.services import workspaces as svc

bp = Blueprint("workspaces", __name__)

_ORDERS = ("ORDER_BY_UNSPECIFIED", "ORDER_BY_ASC", "ORDER_BY_DESC")


def bool_arg(name: str) -> bool | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    if raw.lower() not in ("true", "false"):
        raise InvalidArgument(f"{name}: not a boolean: {raw!r} (true or false)")
    return raw.lower() == "true"


def order_desc() -> bool:
    order = request.args.get("orderBy") or "ORDER_BY_UNSPECIFIED"
    if order not in _ORDERS:
        raise InvalidArgument(f"orderBy: unknown value {order!r} (ORDER_BY_ASC or ORDER_BY_DESC)")
    return order == "ORDER_BY_DESC"


def sort_arg(allowed: tuple[str, ...]) -> str | None:
    sort = request.args.get("sortBy") or None
    if sort is not None and sort not in allowed:
        raise InvalidArgument(f"sortBy: unknown value {sort!r} ({', '.join(allowed)})")
    return sort


def _k8s_refused(data: dict[str, Any]) -> None:
    if data.get("clusterNamespaceMeta") or data.get("clusterQuotaPairs"):
        raise Unimplemented(
            "det has no Kubernetes namespace bindings or resource quotas"
            " (see README: Where det differs from Determined)"
        )


@bp.get("/api/v1/workspaces")
def list_() -> Any:
    offset = int_arg("offset", 0) or 0
    limit = int_arg("limit", 0) or 0
    if bool_arg("pinned"):
        rows: list[dict[str, Any]] = []  # det has no pinned workspaces
        total = 0
    else:
        with db() as conn:
            rows, total = svc.list_(
                conn,
                name=request.args.get("name") or None,
                name_exact=request.args.get("nameCaseSensitive") or None,
                archived=bool_arg("archived"),
                users_in=request.args.getlist("users") or None,
                user_ids=int_list_arg("userIds") or None,
                sort_by=sort_arg(("SORT_BY_UNSPECIFIED", "SORT_BY_ID", "SORT_BY_NAME")),
                order_desc=order_desc(),
                offset=offset,
                limit=limit,
            )
    return {
        "workspaces": [svc.workspace_json(r) for r in rows],
        "pagination": pagination(offset, limit, total),
    }


@bp.post("/api/v1/workspaces")
def create() -> Any:
    data = body()
    _k8s_refused(data)
    with db() as conn:
        row = svc.create(conn, current_user().id, data)
    return {"workspace": svc.workspace_json(row), "namespaceBindings": {}}


@bp.get("/api/v1/workspaces/<int:workspace_id>")
def get(workspace_id: int) -> Any:
    with db() as conn:
        return {"workspace": svc.workspace_json(svc.get(conn, workspace_id))}


@bp.patch("/api/v1/workspaces/<int:workspace_id>")
def patch(workspace_id: int) -> Any:
    data = body()
    _k8s_refused(data)
    with db() as conn:
        _access.workspace(conn, workspace_id)
        row = svc.patch(conn, workspace_id, data)
    return {"workspace": svc.workspace_json(row)}


@bp.delete("/api/v1/workspaces/<int:workspace_id>")
def delete(workspace_id: int) -> Any:
    with db() as conn:
        _access.workspace(conn, workspace_id)
        svc.delete(conn, workspace_id)
    return {"completed": True}


@bp.post("/api/v1/workspaces/<int:workspace_id>/archive")
def archive(workspace_id: int) -> Any:
    with db() as conn:
        _access.workspace(conn, workspace_id)
        svc.set_archived(conn, workspace_id, True)
    return {}


@bp.post("/api/v1/workspaces/<int:workspace_id>/unarchive")
def unarchive(workspace_id: int) -> Any:
    with db() as conn:
        _access.workspace(conn, workspace_id)
        svc.set_archived(conn, workspace_id, False)
    return {}


@bp.get("/api/v1/workspaces/<int:workspace_id>/projects")
def projects(workspace_id: int) -> Any:
    offset = int_arg("offset", 0) or 0
    limit = int_arg("limit", 0) or 0
    with db() as conn:
        if workspace_id:
            svc.get(conn, workspace_id)
        rows, total = project_svc.list_(
            conn,
            workspace_id=workspace_id,
            name=request.args.get("name") or None,
            archived=bool_arg("archived"),
            users_in=request.args.getlist("users") or None,
            user_ids=int_list_arg("userIds") or None,
            sort_by=sort_arg(
                (
                    "SORT_BY_UNSPECIFIED",
                    "SORT_BY_CREATION_TIME",
                    "SORT_BY_LAST_EXPERIMENT_START_TIME",
                    "SORT_BY_NAME",
                    "SORT_BY_DESCRIPTION",
                    "SORT_BY_ID",
                )
            ),
            order_desc=order_desc(),
            offset=offset,
            limit=limit,
        )
    return {
        "projects": [project_svc.project_json(r) for r in rows],
        "pagination": pagination(offset, limit, total),
    }


@bp.post("/api/v1/workspaces/<int:workspace_id>/projects")
def create_project(workspace_id: int) -> Any:
    data = body()
    with db() as conn:
        row = project_svc.create(conn, current_user().id, workspace_id, data)
    return {"project": project_svc.project_json(row)}


@bp.get("/api/v1/workspaces/<int:workspace_id>/available-resource-pools")
def available_pools(workspace_id: int) -> Any:
    """det binds no pools to workspaces: every workspace may use every pool."""
    from det.master.api._common import state

    offset = int_arg("offset", 0) or 0
    limit = int_arg("limit", 0) or 0
    with db() as conn:
        svc.get(conn, workspace_id)
    names = [p.pool_name for p in state().config.resource_pools]
    total = len(names)
    return {
        "resourcePools": names[offset : (offset + limit) if limit > 0 else None],
        "pagination": pagination(offset, limit, total),
    }
