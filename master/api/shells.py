"""``/api/v1/shells``: SSH shells in task containers (``det shell``), reached through the
proxy (a WebSocket carrying the SSH connection)."""

from __future__ import annotations

from flask import Blueprint

from det.master.api import commands as common
from det.master.api._contract import contract
from det.master.expconf.task import TaskKind
from det.master.schemas import commands as task_wire
from det.master.schemas import d
from det.master.schemas import shells as wire
from det.master.services import task_services

bp = Blueprint("shells", __name__)

KIND: TaskKind = "SHELL"


@bp.post("/api/v1/shells")
@contract("LaunchShell")
def launch_shell(body: d.v1LaunchShellRequest) -> d.v1LaunchShellResponse:
    row = common.launch(KIND, body, data=task_services.key_pair())
    return {"shell": wire.shell(row, with_key=True), "config": task_wire.config(row)}


common.task_routes(bp, KIND, "shell", lambda row, mine: wire.shell(row, with_key=mine))
