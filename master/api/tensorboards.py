"""``/api/v1/tensorboards``: TensorBoard tasks (``det tensorboard``) over experiments' or
trials' TensorBoard files, reached through the proxy."""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from det.master.api import commands as common
from det.master.api._common import db
from det.master.api._contract import contract
from det.master.errors import InvalidArgument
from det.master.expconf.task import TaskKind
from det.master.schemas import commands as task_wire
from det.master.schemas import d
from det.master.schemas import tensorboards as wire
from det.master.services import ntsc, tensorboards

bp = Blueprint("tensorboards", __name__)

KIND: TaskKind = "TENSORBOARD"


@bp.post("/api/v1/tensorboards")
@contract("LaunchTensorboard")
def launch_tensorboard(body: d.v1LaunchTensorboardRequest) -> Any:
    if body.get("filters"):
        raise InvalidArgument("filters: not supported; name the experiments in experimentIds")
    with db() as conn:
        data = tensorboards.resolve(
            conn, list(body.get("experimentIds") or []), list(body.get("trialIds") or [])
        )
    row = common.launch(KIND, body, data)
    out: d.v1LaunchTensorboardResponse = {
        "tensorboard": wire.tensorboard(row),
        "config": task_wire.config(row),
        "warnings": [],
    }
    return out


@bp.get("/api/v1/tensorboards")
@contract("GetTensorboards")
def list_tensorboards(params: d.GetTensorboardsParams) -> d.v1GetTensorboardsResponse:
    rows, pag = common.page(common.list_rows(KIND, params), params)
    return {"tensorboards": [wire.tensorboard(r) for r in rows], "pagination": pag}


@bp.get("/api/v1/tensorboards/<tensorboard_id>")
@contract("GetTensorboard")
def get_tensorboard(tensorboard_id: str) -> d.v1GetTensorboardResponse:
    with db() as conn:
        row = ntsc.get(conn, tensorboard_id, KIND)
    return {"tensorboard": wire.tensorboard(row), "config": task_wire.config(row)}


@bp.post("/api/v1/tensorboards/<tensorboard_id>/kill")
@contract("KillTensorboard")
def kill_tensorboard(tensorboard_id: str) -> d.v1KillTensorboardResponse:
    return {"tensorboard": wire.tensorboard(common.kill(KIND, tensorboard_id))}


@bp.post("/api/v1/tensorboards/<tensorboard_id>/set_priority")
@contract("SetTensorboardPriority")
def set_tensorboard_priority(
    tensorboard_id: str, body: d.v1SetTensorboardPriorityRequest
) -> d.v1SetTensorboardPriorityResponse:
    row = common.set_priority(KIND, tensorboard_id, body.get("priority"))
    return {"tensorboard": wire.tensorboard(row)}
