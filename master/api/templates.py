"""``/api/v1/templates``: configuration templates (``det template …``).

A template belongs to a workspace: its members list, read and apply it (det.master.authz;
every user is an open workspace's Editor), one holding secrets is applied only by its owner and
the workspace's assigned Editors (services.templates.check_apply); its owner, the workspace's
WorkspaceAdmins and admins change it."""

from __future__ import annotations

from flask import Blueprint, request

from det.common.jsontypes import JSONObject
from det.master import authz
from det.master.api import _access
from det.master.api._common import Conn, current_user, db, pagination
from det.master.api._contract import contract
from det.master.errors import InvalidArgument
from det.master.schemas import d
from det.master.schemas import templates as wire
from det.master.services import templates as svc
from det.master.services import workspaces
from det.master.wire import Empty, Paging

bp = Blueprint("templates", __name__)


def _in_workspace_of(conn: Conn, body: d.v1Template) -> None:
    """Putting a template in a workspace needs ``template.create`` there."""
    workspace_id = body.get("workspaceId") or workspaces.DEFAULT_ID
    if authz.workspace_of(conn, "workspace", workspace_id) is not None:
        _access.in_workspace(conn, "template.create", workspace_id)


@bp.get("/api/v1/templates")
@contract("GetTemplates")
def list_(params: d.GetTemplatesParams) -> d.v1GetTemplatesResponse:
    user = current_user()
    with db() as conn:
        readable = authz.readable_workspaces(conn, user.id, user.admin)
        rows, total = svc.list_(conn, params, readable)
    offset, limit = Paging.of(params)
    return {
        "templates": [wire.template(r) for r in rows],
        "pagination": pagination(offset, limit, total),
    }


@bp.get("/api/v1/templates/<name>")
@contract("GetTemplate")
def get(name: str) -> d.v1GetTemplateResponse:
    with db() as conn:
        row = svc.get(conn, name)
        _access.read(conn, "template", name, f"template '{name}'")
        return {"template": wire.template(row)}


@bp.post("/api/v1/templates/<name>")
@contract("PostTemplate")
def create(name: str, body: d.v1Template) -> d.v1PostTemplateResponse:
    with db() as conn:
        _in_workspace_of(conn, body)
        row = svc.create(conn, current_user().id, name, body)
    return {"template": wire.template(row)}


@bp.put("/api/v1/templates/<name>")
@contract("PutTemplate")
def put(name: str, body: d.v1Template) -> d.v1PutTemplateResponse:
    with db() as conn:
        if svc.exists(conn, name):
            _access.template(conn, name)
        _in_workspace_of(conn, body)
        row = svc.put(conn, current_user().id, name, body)
    return {"template": wire.template(row)}


@bp.patch("/api/v1/templates/<name>")
@contract("PatchTemplateConfig", body=JSONObject)
def patch_config(name: str, body: JSONObject) -> d.v1PatchTemplateConfigResponse:
    """Determined's client sends the new config itself as the body."""
    if not request.get_data(cache=True):
        raise InvalidArgument("request body: the template's config as a JSON object")
    with db() as conn:
        _access.template(conn, name)
        row = svc.set_config(conn, name, body)
    return {"template": wire.template(row)}


@bp.delete("/api/v1/templates/<name>")
@contract("DeleteTemplate")
def delete(name: str) -> Empty:
    with db() as conn:
        _access.template(conn, name)
        svc.delete(conn, name)
    return {}


@bp.patch("/api/v1/template/rename")
@contract("PatchTemplateName")
def rename(body: d.v1PatchTemplateNameRequest) -> d.v1PatchTemplateNameResponse:
    old, new = body.get("oldName"), body.get("newName")
    if not old:
        raise InvalidArgument("oldName: required")
    if not new:
        raise InvalidArgument("newName: required")
    with db() as conn:
        _access.template(conn, old)
        row = svc.rename(conn, old, new)
    return {"template": wire.template(row)}
