"""``/api/v1/shells``: SSH shells in task containers (``det shell``), reached through the
proxy (a WebSocket carrying the SSH connection)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from det.master.api import commands as common
from det.master.api._common import current_user
from det.master.api._contract import contract
from det.master.expconf.task import TaskKind
from det.master.schemas import commands as task_wire
from det.master.schemas import d
from det.master.schemas import shells as wire
from det.master.services import task_services

bp = Blueprint("shells", __name__)

KIND: TaskKind = "SHELL"


def _mine(row: dict[str, Any]) -> bool:
    user = current_user()
    return bool(user.admin or user.id == row["owner_id"])


@bp.post("/api/v1/shells")
@contract("LaunchShell")
def launch_shell(body: d.v1LaunchShellRequest) -> d.v1LaunchShellResponse:
    row = common.launch(KIND, body, data=task_services.key_pair())
    return {"shell": wire.shell(row, with_key=True), "config": task_wire.config(row)}


@bp.get("/api/v1/shells")
@contract("GetShells")
def list_shells(params: d.GetShellsParams) -> d.v1GetShellsResponse:
    rows, pag = common.page(common.list_rows(KIND, params), params)
    return {"shells": [wire.shell(r, with_key=_mine(r)) for r in rows], "pagination": pag}


@bp.get("/api/v1/shells/<shell_id>")
@contract("GetShell")
def get_shell(shell_id: str) -> d.v1GetShellResponse:
    row = common.get(KIND, shell_id)
    return {"shell": wire.shell(row, with_key=_mine(row)), "config": task_wire.config(row)}


@bp.post("/api/v1/shells/<shell_id>/kill")
@contract("KillShell")
def kill_shell(shell_id: str) -> d.v1KillShellResponse:
    return {"shell": wire.shell(common.kill(KIND, shell_id), with_key=False)}


@bp.post("/api/v1/shells/<shell_id>/set_priority")
@contract("SetShellPriority")
def set_shell_priority(
    shell_id: str, body: d.v1SetShellPriorityRequest
) -> d.v1SetShellPriorityResponse:
    row = common.set_priority(KIND, shell_id, body.get("priority"))
    return {"shell": wire.shell(row, with_key=False)}
