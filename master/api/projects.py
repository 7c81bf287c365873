"""``/api/v1/projects``: a project's details, edits, archive, move, notes and deletion.

Its experiments are listed by ``GET /api/v1/experiments?projectId=N`` (as in Determined)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint
from psycopg.types.json import Jsonb

from det.master import limits
from det.master.api import _access
from det.master.api._common import body, db
from det.master.errors import InvalidArgument
from det.master.services import projects as svc

bp = Blueprint("projects", __name__)

NOTES = 100  # notes per project


@bp.get("/api/v1/projects/<int:project_id>")
def get(project_id: int) -> Any:
    with db() as conn:
        return {"project": svc.project_json(svc.get(conn, project_id))}


@bp.get("/api/v1/projects/key/<key>")
def get_by_key(key: str) -> Any:
    with db() as conn:
        return {"project": svc.project_json(svc.by_key(conn, key))}


@bp.patch("/api/v1/projects/<int:project_id>")
def patch(project_id: int) -> Any:
    data = body()
    with db() as conn:
        _access.project(conn, project_id)
        row = svc.patch(conn, project_id, data)
    return {"project": svc.project_json(row)}


@bp.delete("/api/v1/projects/<int:project_id>")
def delete(project_id: int) -> Any:
    with db() as conn:
        _access.project(conn, project_id)
        svc.delete(conn, project_id)
    return {"completed": True}


@bp.post("/api/v1/projects/<int:project_id>/archive")
def archive(project_id: int) -> Any:
    with db() as conn:
        _access.project(conn, project_id)
        svc.set_archived(conn, project_id, True)
    return {}


@bp.post("/api/v1/projects/<int:project_id>/unarchive")
def unarchive(project_id: int) -> Any:
    with db() as conn:
        _access.project(conn, project_id)
        svc.set_archived(conn, project_id, False)
    return {}


def _int_field(data: dict[str, Any], name: str, *, required: bool = True) -> int | None:
    value = data.get(name)
    if value is None and not required:
        return None
    if type(value) is not int:
        raise InvalidArgument(f"{name}: required integer")
    return value


@bp.post("/api/v1/projects/<int:project_id>/move")
def move(project_id: int) -> Any:
    data = body()
    dest = _int_field(data, "destinationWorkspaceId")
    assert dest is not None
    pid = _int_field(data, "projectId", required=False)
    if pid is not None and pid != project_id:
        raise InvalidArgument(f"projectId: {pid} differs from the path's {project_id}")
    with db() as conn:
        _access.project(conn, project_id)
        svc.move(conn, project_id, dest)
    return {}


def _note(value: Any, field: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise InvalidArgument(f"{field}: must be an object with name and contents")
    return {
        "name": limits.text(f"{field}.name", value.get("name"), limits.NAME),
        "contents": limits.text(f"{field}.contents", value.get("contents"), limits.NOTES),
    }


def _save_notes(conn: Any, project_id: int, notes: list[dict[str, str]]) -> None:
    if len(notes) > NOTES:
        raise InvalidArgument(f"notes: {len(notes)} notes, the limit is {NOTES}")
    size = sum(len(n["contents"]) for n in notes)
    if size > limits.NOTES:
        raise InvalidArgument(f"notes: {size} characters in all, the limit is {limits.NOTES}")
    conn.execute("UPDATE projects SET notes = %s WHERE id = %s", (Jsonb(notes), project_id))


@bp.put("/api/v1/projects/<int:project_id>/notes")
def put_notes(project_id: int) -> Any:
    data = body()
    raw = data.get("notes")
    if not isinstance(raw, list):
        raise InvalidArgument("notes: required list of {name, contents}")
    notes = [_note(n, f"notes[{i}]") for i, n in enumerate(raw)]
    with db() as conn:
        _access.project(conn, project_id)
        _save_notes(conn, project_id, notes)
    return {"notes": notes}


@bp.post("/api/v1/projects/<int:project_id>/notes")
def add_note(project_id: int) -> Any:
    note = _note(body(), "note")
    with db() as conn:
        _access.project(conn, project_id)
        notes = [*svc.get(conn, project_id)["notes"], note]
        _save_notes(conn, project_id, notes)
    return {"notes": notes}
