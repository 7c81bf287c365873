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
