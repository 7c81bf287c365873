"""``/api/v1/projects``: a project's details, edits, archive, move, notes and deletion.

Its experiments are listed by ``GET /api/v1/experiments?projectId=N`` (as in Determined)."""

from __future__ import annotations

from flask import Blueprint

from det.master import authz
from det.master.api import _access
from det.master.api._common import db
from det.master.api._contract import contract
from det.master.errors import InvalidArgument
from det.master.schemas import d
from det.master.schemas import workspaces as wire
from det.master.services import deletion
from det.master.services import projects as svc
from det.master.wire import Empty

bp = Blueprint("projects", __name__)


@bp.get("/api/v1/projects/<int:project_id>")
@contract("GetProject")
def get(project_id: int) -> d.v1GetProjectResponse:
    with db() as conn:
        row = svc.get(conn, project_id)
        _access.in_workspace(conn, "project.view", row["workspace_id"], f"project {project_id}")
        return {"project": wire.project(row)}


@bp.get("/api/v1/projects/key/<key>")
@contract("GetProjectByKey")
def get_by_key(key: str) -> d.v1GetProjectByKeyResponse:
    with db() as conn:
        row = svc.by_key(conn, key)
        _access.in_workspace(conn, "project.view", row["workspace_id"], f"project {row['id']}")
        return {"project": wire.project(row)}


@bp.patch("/api/v1/projects/<int:project_id>")
@contract("PatchProject")
def patch(project_id: int, body: d.v1PatchProject) -> d.v1PatchProjectResponse:
    with db() as conn:
        _access.project(conn, project_id)
        row = svc.patch(conn, project_id, body)
    return {"project": wire.project(row)}


@bp.delete("/api/v1/projects/<int:project_id>")
@contract("DeleteProject")
def delete(project_id: int) -> d.v1DeleteProjectResponse:
    with db() as conn:
        _access.project(conn, project_id)
        deletion.delete_project(conn, project_id)
    return {"completed": True}


@bp.post("/api/v1/projects/<int:project_id>/archive")
@contract("ArchiveProject")
def archive(project_id: int) -> Empty:
    with db() as conn:
        _access.project(conn, project_id)
        svc.set_archived(conn, project_id, True)
    return {}


@bp.post("/api/v1/projects/<int:project_id>/unarchive")
@contract("UnarchiveProject")
def unarchive(project_id: int) -> Empty:
    with db() as conn:
        _access.project(conn, project_id)
        svc.set_archived(conn, project_id, False)
    return {}


def _same_project(given: int | None, project_id: int) -> None:
    if given is not None and given != project_id:
        raise InvalidArgument(f"projectId: {given} differs from the path's {project_id}")


@bp.post("/api/v1/projects/<int:project_id>/move")
@contract("MoveProject")
def move(project_id: int, body: d.v1MoveProjectRequest) -> Empty:
    dest = body.get("destinationWorkspaceId")
    if dest is None:
        raise InvalidArgument("destinationWorkspaceId: required")
    _same_project(body.get("projectId"), project_id)
    with db() as conn:
        _access.project(conn, project_id)
        if authz.workspace_of(conn, "workspace", dest) is not None:
            _access.in_workspace(conn, "project.create", dest)
        svc.move(conn, project_id, dest)
    return {}


@bp.put("/api/v1/projects/<int:project_id>/notes")
@contract("PutProjectNotes")
def put_notes(project_id: int, body: d.v1PutProjectNotesRequest) -> d.v1PutProjectNotesResponse:
    notes = body.get("notes")
    if notes is None:
        raise InvalidArgument("notes: required list of {name, contents}")
    _same_project(body.get("projectId"), project_id)
    with db() as conn:
        _access.project(conn, project_id)
        return {"notes": svc.set_notes(conn, project_id, notes)}


@bp.post("/api/v1/projects/<int:project_id>/notes")
@contract("AddProjectNote")
def add_note(project_id: int, body: d.v1Note) -> d.v1AddProjectNoteResponse:
    with db() as conn:
        _access.project(conn, project_id)
        notes = [*svc.get(conn, project_id)["notes"], body]
        return {"notes": svc.set_notes(conn, project_id, notes)}
