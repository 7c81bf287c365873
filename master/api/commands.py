"""``/api/v1/commands``: launch, list, read, kill and reprioritise commands (``det cmd``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint
from flask.typing import ResponseReturnValue

from det.common.jsontypes import JSONObject
from det.master import authz, expconf
from det.master.api import _access
from det.master.api._common import Conn, current_user, db, pagination, state
from det.master.api._contract import contract
from det.master.errors import InvalidArgument
from det.master.expconf.task import TaskKind
from det.master.rows.tasks import Task, TaskData
from det.master.schemas import commands as wire
from det.master.schemas import d
from det.master.services import containers, ntsc, pool_bindings, tensorboards
from det.master.services import experiments as exp_svc
from det.master.services import jobs as jobs_svc
from det.master.services import tasks as tasks_svc
from det.master.services import templates as templates_svc
from det.master.wire import Paging

bp = Blueprint("commands", __name__)

KIND: TaskKind = "COMMAND"

# What the interactive task kinds' launch, list and set_priority requests have in common.
LaunchRequest = (
    d.v1LaunchCommandRequest
    | d.v1LaunchNotebookRequest
    | d.v1LaunchShellRequest
    | d.v1LaunchTensorboardRequest
)
ListParams = (
    d.GetCommandsParams | d.GetNotebooksParams | d.GetShellsParams | d.GetTensorboardsParams
)
PriorityRequest = (
    d.v1SetCommandPriorityRequest
    | d.v1SetNotebookPriorityRequest
    | d.v1SetShellPriorityRequest
    | d.v1SetTensorboardPriorityRequest
)


def launch_config(conn: Conn, kind: TaskKind, body: LaunchRequest) -> JSONObject:
    """The resolved config of a launch request (its template merged under it, then the
    cluster's defaults), shared by every interactive task's launch route."""
    raw = body.get("config")
    if raw is not None and not isinstance(raw, dict):
        raise InvalidArgument("config: must be an object")
    raw = dict(raw or {})
    template = body.get("templateName")
    if template:
        user = current_user()
        row = templates_svc.check_apply(conn, template, user.id, user.admin, "templateName")
        raw = expconf.merge_template(raw, row["config"])
    ws_id = body.get("workspaceId")
    ws_pool = pool_bindings.default_pool(conn, int(ws_id), aux=True) if ws_id else None
    return ntsc.resolve_config(state(), kind, raw, ws_pool)


def launch(kind: TaskKind, body: LaunchRequest, data: TaskData | None = None) -> Task:
    """Launches a task of ``kind`` from a Launch*Request; returns its ``get`` row."""
    files = exp_svc.parse_files(body.get("files") or [])
    user = current_user()
    with db() as conn:
        config = launch_config(conn, kind, body)
        containers.check_policy(
            state(),
            config,
            admin=user.admin,
            extra_mounts=tensorboards.storage_mounts(data or {}),
        )
        row = ntsc.launch(
            conn,
            state(),
            kind=kind,
            owner_id=user.id,
            config=config,
            files=files,
            workspace_id=body.get("workspaceId") or None,
            data=data,
        )
        return ntsc.get(conn, row["id"])


def get(kind: str, task_id: str) -> Task:
    """The task's row (NotFound unless it is a task of ``kind``), for a caller who may read it
    (its owner, or ``task.view`` in its workspace: det.master.authz)."""
    with db() as conn:
        row = ntsc.get(conn, task_id, kind)
        user = current_user()
        mine = user.admin or user.id == row["owner_id"]
        if not mine and authz.is_private(conn, row["workspace_id"]):
            authz.require(
                conn, user.id, False, "task.view", row["workspace_id"],
                what=f"{kind.lower()} {task_id}",
            )  # fmt: skip
        return row


def list_rows(kind: str, params: ListParams) -> list[Task]:
    """The tasks of ``kind`` the caller may read: their own and readable workspaces'."""
    user = current_user()
    with db() as conn:
        rows = ntsc.list_tasks(
            conn,
            kind,
            user_ids=list(params.get("userIds") or []) or None,
            usernames=list(params.get("users") or []) or None,
            workspace_id=params.get("workspaceId"),
        )
        readable = authz.readable_workspaces(conn, user.id, user.admin)
    if readable is not None:
        mine = set(readable)
        rows = [r for r in rows if r["owner_id"] == user.id or r["workspace_id"] in mine]
    if params.get("orderBy") == "ORDER_BY_DESC":
        rows.reverse()
    return rows


def page(rows: list[Task], params: ListParams) -> tuple[list[Task], d.v1Pagination]:
    offset, limit = Paging.of(params)
    return rows[offset : (offset + limit) if limit > 0 else None], pagination(
        offset, limit, len(rows)
    )


def kill(kind: str, task_id: str) -> Task:
    with db() as conn:
        _access.ntsc_task(conn, task_id, kind)
        tasks_svc.kill(conn, task_id)
        return ntsc.get(conn, task_id, kind)


def set_priority(kind: str, task_id: str, priority: int | None) -> Task:
    if priority is None:
        raise InvalidArgument("priority: required integer from 1 to 99")
    with db() as conn:
        _access.ntsc_task(conn, task_id, kind)
        row = ntsc.get(conn, task_id, kind)
        jobs_svc.update(conn, row["job_id"], priority=int(priority))
        return ntsc.get(conn, task_id, kind)


def task_routes(
    bp: Blueprint,
    kind: TaskKind,
    noun: str,
    show: Callable[[Task, bool], object],
    *,
    list_response: Any = None,
    get_response: Any = None,
) -> None:
    """Adds the list, get, kill and set_priority routes of one interactive task kind to ``bp``
    (``/api/v1/<noun>s``, operations Get<Noun>s, Get<Noun>, Kill<Noun>, Set<Noun>Priority).
    What differs between kinds is data: ``show(row, reader_may_see_secrets)`` is the kind's
    wire object (a list or a get passes whether the caller may see the task's secrets, a kill
    or a set_priority False); ``list_response`` and ``get_response`` are the list's and the
    get's own response types (by default Determined's).
    The views are built for every kind, so mypy sees their answers as Flask's; the contract's
    response type is what checks them (and documents them in the OpenAPI document)."""
    plural, title = f"{noun}s", noun[0].upper() + noun[1:]

    def may_see(row: Task) -> bool:
        user = current_user()
        return bool(user.admin or user.id == row["owner_id"])

    def list_tasks(params: ListParams) -> ResponseReturnValue:
        rows, pag = page(list_rows(kind, params), params)
        return {plural: [show(r, may_see(r)) for r in rows], "pagination": pag}

    key = f"{noun}_id"  # the path's variable, as the OpenAPI document names it

    def get_task(**path: str) -> ResponseReturnValue:
        row = get(kind, path[key])
        return {noun: show(row, may_see(row)), "config": wire.config(row)}

    def kill_task(**path: str) -> ResponseReturnValue:
        return {noun: show(kill(kind, path[key]), False)}

    def set_task_priority(body: PriorityRequest, **path: str) -> ResponseReturnValue:
        return {noun: show(set_priority(kind, path[key], body.get("priority")), False)}

    base, one = f"/api/v1/{plural}", f"/api/v1/{plural}/<{key}>"
    routes: tuple[tuple[str, str, str, str, Callable[..., ResponseReturnValue], Any], ...] = (
        (base, "GET", f"Get{title}s", f"list_{plural}", list_tasks, list_response),
        (one, "GET", f"Get{title}", f"get_{noun}", get_task, get_response),
        (one + "/kill", "POST", f"Kill{title}", f"kill_{noun}", kill_task, None),
        (
            one + "/set_priority",
            "POST",
            f"Set{title}Priority",
            f"set_{noun}_priority",
            set_task_priority,
            None,
        ),
    )
    for path, method, operation, endpoint, fn, response in routes:
        view = contract(operation, response=response)(fn)
        bp.add_url_rule(path, endpoint=endpoint, view_func=view, methods=[method])


@bp.post("/api/v1/commands")
@contract("LaunchCommand", response=wire.CommandResponse)
def launch_command(body: d.v1LaunchCommandRequest) -> wire.CommandResponse:
    row = launch(KIND, body)
    return {"command": wire.command(row), "config": wire.config(row)}


task_routes(
    bp,
    KIND,
    "command",
    lambda row, _: wire.command(row),
    list_response=wire.GetCommandsResponse,
    get_response=wire.CommandResponse,
)
