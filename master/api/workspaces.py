"""``/api/v1/workspaces``: workspaces and the projects in them.

Reading a workspace (and its projects and pools) needs a role there, creating a project in it
Editor (det.master.authz: every user is an open workspace's Editor); its owner, WorkspaceAdmins
and admins change it (:mod:`._access`). Any user may create a workspace."""

from __future__ import annotations

from flask import Blueprint

from det.master import authz
from det.master.api import _access
from det.master.api._common import current_user, db, pagination, state
from det.master.api._contract import contract
from det.master.errors import Unimplemented
from det.master.rows.workspaces import Workspace
from det.master.schemas import d
from det.master.schemas import workspaces as wire
from det.master.services import deletion, pool_bindings
from det.master.services import projects as project_svc
from det.master.services import workspaces as svc
from det.master.wire import Empty, Paging

bp = Blueprint("workspaces", __name__)


def _k8s_refused(data: d.v1PostWorkspaceRequest | d.v1PatchWorkspace) -> None:
    if data.get("clusterNamespaceMeta") or data.get("clusterQuotaPairs"):
        raise Unimplemented(
            "det has no Kubernetes namespace bindings or resource quotas"
            " (see README: Where det differs from Determined)"
        )


@bp.get("/api/v1/workspaces")
@contract("GetWorkspaces")
def list_(params: d.GetWorkspacesParams) -> d.v1GetWorkspacesResponse:
    offset, limit = Paging.of(params)
    if params.get("pinned"):
        rows: list[Workspace] = []  # det has no pinned workspaces
        total = 0
    else:
        user = current_user()
        with db() as conn:
            readable = authz.readable_workspaces(conn, user.id, user.admin)
            rows, total = svc.list_(conn, params, readable)
    return {
        "workspaces": [wire.workspace(r) for r in rows],
        "pagination": pagination(offset, limit, total),
    }


@bp.post("/api/v1/workspaces")
@contract("PostWorkspace")
def create(body: d.v1PostWorkspaceRequest) -> d.v1PostWorkspaceResponse:
    _k8s_refused(body)
    with db() as conn:
        row = svc.create(conn, current_user().id, body)
        pool_bindings.check_defaults(
            conn, state(), row["id"], row["default_compute_pool"], row["default_aux_pool"]
        )
    return {"workspace": wire.workspace(row), "namespaceBindings": {}}


@bp.get("/api/v1/workspaces/<int:workspace_id>")
@contract("GetWorkspace")
def get(workspace_id: int) -> d.v1GetWorkspaceResponse:
    with db() as conn:
        row = svc.get(conn, workspace_id)
        _access.in_workspace(conn, "workspace.view", workspace_id)
        return {"workspace": wire.workspace(row)}


@bp.patch("/api/v1/workspaces/<int:workspace_id>")
@contract("PatchWorkspace")
def patch(workspace_id: int, body: d.v1PatchWorkspace) -> d.v1PatchWorkspaceResponse:
    _k8s_refused(body)
    with db() as conn:
        _access.workspace(conn, workspace_id)
        row = svc.patch(conn, workspace_id, body)
        pool_bindings.check_defaults(
            conn, state(), workspace_id, row["default_compute_pool"], row["default_aux_pool"]
        )
    return {"workspace": wire.workspace(row)}


@bp.delete("/api/v1/workspaces/<int:workspace_id>")
@contract("DeleteWorkspace")
def delete(workspace_id: int) -> d.v1DeleteWorkspaceResponse:
    with db() as conn:
        _access.workspace(conn, workspace_id)
        deletion.delete_workspace(conn, workspace_id)
    return {"completed": True}


@bp.post("/api/v1/workspaces/<int:workspace_id>/archive")
@contract("ArchiveWorkspace")
def archive(workspace_id: int) -> Empty:
    with db() as conn:
        _access.workspace(conn, workspace_id)
        svc.set_archived(conn, workspace_id, True)
    return {}


@bp.post("/api/v1/workspaces/<int:workspace_id>/unarchive")
@contract("UnarchiveWorkspace")
def unarchive(workspace_id: int) -> Empty:
    with db() as conn:
        _access.workspace(conn, workspace_id)
        svc.set_archived(conn, workspace_id, False)
    return {}


@bp.get("/api/v1/workspaces/<int:workspace_id>/projects")
@contract("GetWorkspaceProjects")
def projects(
    workspace_id: int, params: d.GetWorkspaceProjectsParams
) -> d.v1GetWorkspaceProjectsResponse:
    offset, limit = Paging.of(params)
    user = current_user()
    with db() as conn:
        readable = None
        if workspace_id:
            svc.get(conn, workspace_id)
            _access.in_workspace(conn, "workspace.view", workspace_id)
        else:
            readable = authz.readable_workspaces(conn, user.id, user.admin)
        rows, total = project_svc.list_(conn, workspace_id, params, readable)
    return {
        "projects": [wire.project(r) for r in rows],
        "pagination": pagination(offset, limit, total),
    }


@bp.post("/api/v1/workspaces/<int:workspace_id>/projects")
@contract("PostProject")
def create_project(workspace_id: int, body: d.v1PostProjectRequest) -> d.v1PostProjectResponse:
    with db() as conn:
        svc.get(conn, workspace_id)
        _access.in_workspace(conn, "project.create", workspace_id)
        row = project_svc.create(conn, current_user().id, workspace_id, body)
    return {"project": wire.project(row)}


@bp.get("/api/v1/workspaces/<int:workspace_id>/available-resource-pools")
@contract("ListRPsBoundToWorkspace")
def available_pools(
    workspace_id: int, params: d.ListRPsBoundToWorkspaceParams
) -> d.v1ListRPsBoundToWorkspaceResponse:
    """The pools the workspace may use: those bound to it and those bound to none."""
    offset, limit = Paging.of(params)
    with db() as conn:
        svc.get(conn, workspace_id)
        _access.in_workspace(conn, "workspace.view", workspace_id)
        names = pool_bindings.available(conn, state(), workspace_id)
    total = len(names)
    return {
        "resourcePools": names[offset : (offset + limit) if limit > 0 else None],
        "pagination": pagination(offset, limit, total),
    }
