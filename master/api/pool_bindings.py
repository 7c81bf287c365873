"""``/api/v1/resource-pools/<name>/workspace-bindings`` (``det resource-pool bindings``): admins
bind pools to workspaces; anyone reads the bindings (Determined's shapes)."""

from __future__ import annotations

from flask import Blueprint

from det.master.api._common import db, pagination, require_admin, state
from det.master.api._contract import contract
from det.master.errors import NotFound
from det.master.schemas import d
from det.master.services import pool_bindings as svc
from det.master.wire import Empty, Paging

bp = Blueprint("pool_bindings", __name__)

R = "/api/v1/resource-pools/<name>/workspace-bindings"

Change = (
    d.v1BindRPToWorkspaceRequest
    | d.v1UnbindRPFromWorkspaceRequest
    | d.v1OverwriteRPWorkspaceBindingsRequest
)


def _change(name: str, body: Change, what: str) -> Empty:
    require_admin()
    with db() as conn:
        ids = svc.workspace_ids(conn, body.get("workspaceIds"), body.get("workspaceNames"))
        getattr(svc, what)(conn, state(), name, ids)
    return {}


@bp.post(R)
@contract("BindRPToWorkspace")
def bind(name: str, body: d.v1BindRPToWorkspaceRequest) -> Empty:
    return _change(name, body, "bind")


@bp.delete(R)
@contract("UnbindRPFromWorkspace")
def unbind(name: str, body: d.v1UnbindRPFromWorkspaceRequest) -> Empty:
    return _change(name, body, "unbind")


@bp.put(R)
@contract("OverwriteRPWorkspaceBindings")
def overwrite(name: str, body: d.v1OverwriteRPWorkspaceBindingsRequest) -> Empty:
    return _change(name, body, "overwrite")


@bp.get(R)
@contract("ListWorkspacesBoundToRP")
def list_bound(
    name: str, params: d.ListWorkspacesBoundToRPParams
) -> d.v1ListWorkspacesBoundToRPResponse:
    offset, limit = Paging.of(params)
    if state().config.pool(name) is None:
        raise NotFound(f"resource pool '{name}' not found")
    with db() as conn:
        ids = svc.bound(conn, name)
    return {
        "workspaceIds": ids[offset : (offset + limit) if limit > 0 else None],
        "pagination": pagination(offset, limit, len(ids)),
    }
