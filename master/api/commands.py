"""``/api/v1/commands``: launch, list, read, kill and reprioritise commands (``det cmd``)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from det.master import expconf
from det.master.api import _access
from det.master.api._common import current_user, db, pagination, state
from det.master.api._contract import contract
from det.master.errors import InvalidArgument, NotFound
from det.master.expconf.task import TaskKind
from det.master.schemas import commands as wire
from det.master.schemas import d
from det.master.services import experiments as exp_svc
from det.master.services import jobs as jobs_svc
from det.master.services import ntsc
from det.master.services import templates as templates_svc

bp = Blueprint("commands", __name__)

KIND: TaskKind = "COMMAND"


def launch_config(conn: Any, kind: TaskKind, body: Any) -> dict[str, Any]:
    """The resolved config of a launch request (its template merged under it, then the
    cluster's defaults), shared by every interactive task's launch route."""
    raw = body.get("config")
    if raw is not None and not isinstance(raw, dict):
        raise InvalidArgument("config: must be an object")
    raw = dict(raw or {})
    template = body.get("templateName")
    if template:
        try:
            raw = expconf.merge_template(raw, templates_svc.get(conn, template)["config"])
        except NotFound:
            raise InvalidArgument(f"templateName: no template named {template!r}") from None
    return ntsc.resolve_config(state(), kind, raw)


def launch(kind: TaskKind, body: Any, data: dict[str, Any] | None = None) -> Any:
    """Launches a task of ``kind`` from a Launch*Request; returns its ``get`` row."""
    files = exp_svc.parse_files(body.get("files") or [])
    with db() as conn:
        config = launch_config(conn, kind, body)
        row = ntsc.launch(
            conn,
            state(),
            kind=kind,
            owner_id=current_user().id,
            config=config,
            files=files,
            workspace_id=body.get("workspaceId") or None,
            data=data,
        )
        return ntsc.get(conn, row["id"])


def get(kind: str, task_id: str) -> dict[str, Any]:
    """The task's row (NotFound unless it is a task of ``kind``)."""
    with db() as conn:
        return ntsc.get(conn, task_id, kind)


def list_rows(kind: str, params: Any) -> list[dict[str, Any]]:
    with db() as conn:
        rows = ntsc.list_tasks(
            conn,
            kind,
            user_ids=list(params.get("userIds") or []) or None,
            usernames=list(params.get("users") or []) or None,
            workspace_id=params.get("workspaceId"),
        )
    if params.get("orderBy") == "ORDER_BY_DESC":
        rows.reverse()
    return rows


def page(rows: list[Any], params: Any) -> tuple[list[Any], d.v1Pagination]:
    offset = params.get("offset") or 0
    limit = params.get("limit") or 0
    return rows[offset : (offset + limit) if limit > 0 else None], pagination(
        offset, limit, len(rows)
    )


def kill(kind: str, task_id: str) -> dict[str, Any]:
    with db() as conn:
        _access.ntsc_task(conn, task_id, kind)
        ntsc.kill(conn, task_id)
        return ntsc.get(conn, task_id, kind)


def set_priority(kind: str, task_id: str, priority: Any) -> dict[str, Any]:
    if priority is None:
        raise InvalidArgument("priority: required integer from 1 to 99")
    with db() as conn:
        _access.ntsc_task(conn, task_id, kind)
        row = ntsc.get(conn, task_id, kind)
        jobs_svc.update(conn, row["job_id"], priority=int(priority))
        return ntsc.get(conn, task_id, kind)


@bp.post("/api/v1/commands")
@contract("LaunchCommand", response=wire.CommandResponse)
def launch_command(body: d.v1LaunchCommandRequest) -> wire.CommandResponse:
    row = launch(KIND, body)
    return {"command": wire.command(row), "config": wire.config(row)}


@bp.get("/api/v1/commands")
@contract("GetCommands", response=wire.GetCommandsResponse)
def list_commands(params: d.GetCommandsParams) -> wire.GetCommandsResponse:
    rows, pag = page(list_rows(KIND, params), params)
    return {"commands": [wire.command(r) for r in rows], "pagination": pag}


@bp.get("/api/v1/commands/<command_id>")
@contract("GetCommand", response=wire.CommandResponse)
def get_command(command_id: str) -> wire.CommandResponse:
    row = get(KIND, command_id)
    return {"command": wire.command(row), "config": wire.config(row)}


@bp.post("/api/v1/commands/<command_id>/kill")
@contract("KillCommand")
def kill_command(command_id: str) -> d.v1KillCommandResponse:
    return {"command": wire.command(kill(KIND, command_id))}


@bp.post("/api/v1/commands/<command_id>/set_priority")
@contract("SetCommandPriority")
def set_command_priority(
    command_id: str, body: d.v1SetCommandPriorityRequest
) -> d.v1SetCommandPriorityResponse:
    row = set_priority(KIND, command_id, body.get("priority"))
    return {"command": wire.command(row)}
