"""``/api/v1/tensorboards``: TensorBoard tasks (``det tensorboard``) over experiments' or
trials' TensorBoard files, reached through the proxy."""

from __future__ import annotations

from flask import Blueprint

from det.master.api import _access
from det.master.api import commands as common
from det.master.api._common import db
from det.master.api._contract import contract
from det.master.errors import InvalidArgument
from det.master.expconf.task import TaskKind
from det.master.schemas import d
from det.master.schemas import tensorboards as wire
from det.master.schemas.commands import config as shown_config
from det.master.services import tensorboards

bp = Blueprint("tensorboards", __name__)

KIND: TaskKind = "TENSORBOARD"


@bp.post("/api/v1/tensorboards")
@contract("LaunchTensorboard")
def launch_tensorboard(body: d.v1LaunchTensorboardRequest) -> d.v1LaunchTensorboardResponse:
    if body.get("filters"):
        raise InvalidArgument("filters: not supported; name the experiments in experimentIds")
    with db() as conn:
        data = tensorboards.resolve(
            conn, list(body.get("experimentIds") or []), list(body.get("trialIds") or [])
        )
        # It reads their metrics and checkpoint storage: each must be readable by the caller.
        for eid in sorted({s["experimentId"] for s in data.get("sources") or []}):
            _access.read_experiment(conn, eid)
    row = common.launch(KIND, body, data)
    return {"tensorboard": wire.tensorboard(row), "config": shown_config(row), "warnings": []}


common.task_routes(bp, KIND, "tensorboard", lambda row, _: wire.tensorboard(row))
