"""``/api/v1/notebooks``: JupyterLab tasks (``det notebook``), reached through the proxy."""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from det.master import proxy
from det.master.api import commands as common
from det.master.api._common import db
from det.master.api._contract import contract
from det.master.expconf.task import TaskKind
from det.master.schemas import commands as task_wire
from det.master.schemas import d
from det.master.schemas import notebooks as wire
from det.master.services import ntsc

bp = Blueprint("notebooks", __name__)
# The front's proxy (det.master.proxy) serves /proxy/<task id>/ with this app's state.
bp.record_once(lambda setup: proxy.bind(setup.app.extensions.get("det")))

KIND: TaskKind = "NOTEBOOK"


@bp.post("/api/v1/notebooks")
@contract("LaunchNotebook")
def launch_notebook(body: d.v1LaunchNotebookRequest) -> Any:
    if body.get("preview"):
        with db() as conn:
            config = common.launch_config(conn, KIND, body)
        return {"notebook": None, "config": config, "warnings": []}
    row = common.launch(KIND, body)
    out: d.v1LaunchNotebookResponse = {
        "notebook": wire.notebook(row),
        "config": task_wire.config(row),
        "warnings": [],
    }
    return out


@bp.get("/api/v1/notebooks")
@contract("GetNotebooks")
def list_notebooks(params: d.GetNotebooksParams) -> d.v1GetNotebooksResponse:
    rows, pag = common.page(common.list_rows(KIND, params), params)
    return {"notebooks": [wire.notebook(r) for r in rows], "pagination": pag}


@bp.get("/api/v1/notebooks/<notebook_id>")
@contract("GetNotebook")
def get_notebook(notebook_id: str) -> d.v1GetNotebookResponse:
    with db() as conn:
        row = ntsc.get(conn, notebook_id, KIND)
    return {"notebook": wire.notebook(row), "config": task_wire.config(row)}


@bp.post("/api/v1/notebooks/<notebook_id>/kill")
@contract("KillNotebook")
def kill_notebook(notebook_id: str) -> d.v1KillNotebookResponse:
    return {"notebook": wire.notebook(common.kill(KIND, notebook_id))}


@bp.post("/api/v1/notebooks/<notebook_id>/set_priority")
@contract("SetNotebookPriority")
def set_notebook_priority(
    notebook_id: str, body: d.v1SetNotebookPriorityRequest
) -> d.v1SetNotebookPriorityResponse:
    return {"notebook": wire.notebook(common.set_priority(KIND, notebook_id, body.get("priority")))}
