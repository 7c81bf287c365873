"""``/api/v1/checkpoints``."""

from __future__ import annotations

from typing import Any

from flask import Blueprint
from psycopg.types.json import Jsonb

from det.master.api._common import TASK, USER, allow, body, check_task_scope, db, principal
from det.master.services import checkpoints as svc

bp = Blueprint("checkpoints", __name__)


@bp.post("/api/v1/checkpoints")
@allow(TASK, USER)
def report() -> Any:
    data = body()
    ckpt = data.get("checkpoint", data)
    p = principal()
    task_id = p.task.task_id if p.task else None
    if p.task is not None and ckpt.get("taskId") not in (None, task_id):
        check_task_scope(task_id=str(ckpt.get("taskId")))
    with db() as conn:
        svc.report(conn, ckpt, task_id=task_id or ckpt.get("taskId"))
    return {}


@bp.get("/api/v1/checkpoints/<uid>")
@allow(TASK, USER)
def get(uid: str) -> Any:
    with db() as conn:
        return {"checkpoint": svc.checkpoint_json(svc.get(conn, uid))}


@bp.patch("/api/v1/checkpoints")
@allow(TASK, USER)
def patch() -> Any:
    # Deletions reported by the harness (partial deletes keep the remaining resources).
    items = body().get("checkpoints") or []
    with db() as conn:
        for item in items:
            res = (item.get("resources") or {}).get("resources")
            if res is not None:
                conn.execute(
                    "UPDATE checkpoints SET resources = %s, state = CASE WHEN %s THEN 'DELETED' ELSE 'PARTIALLY_DELETED' END"
                    " WHERE uuid = %s",
                    (Jsonb(res), not res, item.get("uuid")),
                )
    return {}
