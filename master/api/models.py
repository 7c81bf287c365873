"""``/api/v1/models``: the model registry."""

from __future__ import annotations

from flask import Blueprint

from det.master.api import _access
from det.master.api._common import Conn, current_user, db, pagination
from det.master.api._contract import contract
from det.master.rows.models import Version
from det.master.schemas import checkpoints as checkpoint_wire
from det.master.schemas import d
from det.master.schemas import models as wire
from det.master.services import checkpoints as ckpt_svc
from det.master.services import models as svc
from det.master.wire import Empty, Paging

bp = Blueprint("models", __name__)


def _version(conn: Conn, v: Version) -> d.v1ModelVersion:
    checkpoint = checkpoint_wire.checkpoint(ckpt_svc.get(conn, str(v["checkpoint_uuid"])))
    return wire.version(v, svc.by_id(conn, v["model_id"]), checkpoint)


@bp.post("/api/v1/models")
@contract("PostModel")
def create(body: d.v1PostModelRequest) -> d.v1PostModelResponse:
    with db() as conn:
        return {"model": wire.model(svc.create(conn, current_user().id, body))}


@bp.get("/api/v1/models")
@contract("GetModels")
def list_(params: d.GetModelsParams) -> d.v1GetModelsResponse:
    with db() as conn:
        rows, total = svc.list_(conn, params)
    offset, limit = Paging.of(params)
    return {"models": [wire.model(r) for r in rows], "pagination": pagination(offset, limit, total)}


@bp.get("/api/v1/model/labels")
@contract("GetModelLabels")
def labels(params: d.GetModelLabelsParams) -> d.v1GetModelLabelsResponse:
    with db() as conn:
        return {"labels": svc.labels(conn, params.get("workspaceId") or None)}


@bp.get("/api/v1/models/<name>")
@contract("GetModel")
def get(name: str) -> d.v1GetModelResponse:
    with db() as conn:
        return {"model": wire.model(svc.get(conn, name))}


@bp.post("/api/v1/models/<name>/versions")
@contract("PostModelVersion")
def register_version(name: str, body: d.v1PostModelVersionRequest) -> d.v1PostModelVersionResponse:
    with db() as conn:
        _access.model(conn, name)
        row = svc.register_version(conn, current_user().id, name, body)
        return {"modelVersion": _version(conn, row)}


@bp.get("/api/v1/models/<name>/versions")
@contract("GetModelVersions")
def versions(name: str, params: d.GetModelVersionsParams) -> d.v1GetModelVersionsResponse:
    with db() as conn:
        model = svc.get(conn, name)
        rows, total = svc.versions(conn, model["id"], params)
        out = [_version(conn, v) for v in rows]
    offset, limit = Paging.of(params)
    return {
        "model": wire.model(model),
        "modelVersions": out,
        "pagination": pagination(offset, limit, total),
    }


@bp.patch("/api/v1/models/<name>")
@contract("PatchModel")
def patch(name: str, body: d.v1PatchModel) -> d.v1PatchModelResponse:
    with db() as conn:
        _access.model(conn, svc.get(conn, name)["name"])
        return {"model": wire.model(svc.patch(conn, name, body))}


@bp.delete("/api/v1/models/<name>")
@contract("DeleteModel")
def delete(name: str) -> Empty:
    with db() as conn:
        _access.model(conn, svc.get(conn, name)["name"])
        svc.delete(conn, name)
    return {}


@bp.post("/api/v1/models/<name>/archive")
@contract("ArchiveModel")
def archive(name: str) -> Empty:
    with db() as conn:
        _access.model(conn, svc.get(conn, name)["name"])
        svc.set_archived(conn, name, True)
    return {}


@bp.post("/api/v1/models/<name>/unarchive")
@contract("UnarchiveModel")
def unarchive(name: str) -> Empty:
    with db() as conn:
        _access.model(conn, svc.get(conn, name)["name"])
        svc.set_archived(conn, name, False)
    return {}


@bp.post("/api/v1/models/<name>/move")
@contract("MoveModel")
def move(name: str, body: d.v1MoveModelRequest) -> Empty:
    with db() as conn:
        _access.model(conn, svc.get(conn, name)["name"])
        svc.move(conn, name, body)
    return {}


@bp.get("/api/v1/models/<name>/versions/<int:number>")
@contract("GetModelVersion")
def get_version(name: str, number: int) -> d.v1GetModelVersionResponse:
    with db() as conn:
        return {"modelVersion": _version(conn, svc.version(conn, name, number))}


@bp.patch("/api/v1/models/<name>/versions/<int:number>")
@contract("PatchModelVersion")
def patch_version(
    name: str, number: int, body: d.v1PatchModelVersion
) -> d.v1PatchModelVersionResponse:
    with db() as conn:
        _access.model(conn, svc.get(conn, name)["name"])
        return {"modelVersion": _version(conn, svc.patch_version(conn, name, number, body))}


@bp.delete("/api/v1/models/<name>/versions/<int:number>")
@contract("DeleteModelVersion")
def delete_version(name: str, number: int) -> Empty:
    with db() as conn:
        _access.model(conn, svc.get(conn, name)["name"])
        svc.delete_version(conn, name, number)
    return {}
