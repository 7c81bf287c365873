"""``/api/v1/models``: the model registry."""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from det.master.api import _access
from det.master.api._common import body, current_user, db, pagination
from det.master.services import models as svc

bp = Blueprint("models", __name__)


@bp.post("/api/v1/models")
def create() -> Any:
    with db() as conn:
        return {"model": svc.model_json(svc.create(conn, current_user().id, body()))}


@bp.get("/api/v1/models")
def list_() -> Any:
    with db() as conn:
        rows = svc.list_(conn)
    return {"models": [svc.model_json(r) for r in rows], "pagination": pagination(0, 0, len(rows))}


@bp.get("/api/v1/models/<name>")
def get(name: str) -> Any:
    with db() as conn:
        return {"model": svc.model_json(svc.get(conn, name))}


@bp.post("/api/v1/models/<name>/versions")
def register_version(name: str) -> Any:
    data = body()
    with db() as conn:
        _access.model(conn, name)
        return {"modelVersion": svc.register_version(conn, current_user().id, name, data)}


@bp.get("/api/v1/models/<name>/versions")
def versions(name: str) -> Any:
    with db() as conn:
        model = svc.get(conn, name)
        rows = [svc.version_json(conn, v) for v in svc.versions(conn, name)]
    return {
        "model": svc.model_json(model),
        "modelVersions": rows,
        "pagination": pagination(0, 0, len(rows)),
    }


@bp.patch("/api/v1/models/<name>")
def patch(name: str) -> Any:
    data = body()
    with db() as conn:
        _access.model(conn, svc.get(conn, name)["name"])
        return {"model": svc.model_json(svc.patch(conn, name, data))}


@bp.delete("/api/v1/models/<name>")
def delete(name: str) -> Any:
    with db() as conn:
        _access.model(conn, svc.get(conn, name)["name"])
        svc.delete(conn, name)
    return {}


@bp.post("/api/v1/models/<name>/archive")
def archive(name: str) -> Any:
    with db() as conn:
        _access.model(conn, svc.get(conn, name)["name"])
        svc.set_archived(conn, name, True)
    return {}


@bp.post("/api/v1/models/<name>/unarchive")
def unarchive(name: str) -> Any:
    with db() as conn:
        _access.model(conn, svc.get(conn, name)["name"])
        svc.set_archived(conn, name, False)
    return {}


@bp.post("/api/v1/models/<name>/move")
def move(name: str) -> Any:
    data = body()
    with db() as conn:
        _access.model(conn, svc.get(conn, name)["name"])
        svc.move(conn, name, data)
    return {}


@bp.get("/api/v1/models/<name>/versions/<int:number>")
def get_version(name: str, number: int) -> Any:
    with db() as conn:
        return {"modelVersion": svc.version_json(conn, svc.version(conn, name, number))}


@bp.patch("/api/v1/models/<name>/versions/<int:number>")
def patch_version(name: str, number: int) -> Any:
    data = body()
    with db() as conn:
        _access.model(conn, svc.get(conn, name)["name"])
        row = svc.patch_version(conn, name, number, data)
        return {"modelVersion": svc.version_json(conn, row)}


@bp.delete("/api/v1/models/<name>/versions/<int:number>")
def delete_version(name: str, number: int) -> Any:
    with db() as conn:
        _access.model(conn, svc.get(conn, name)["name"])
        svc.delete_version(conn, name, number)
    return {}
