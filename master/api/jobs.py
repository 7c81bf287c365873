"""Job queues (v1 and v2) and resource pools."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, request

from det.master.api import _access
from det.master.api._common import body, db, int_arg, pagination, state
from det.master.errors import InvalidArgument
from det.master.schemas import d
from det.master.services import jobs as svc
from det.master.services import pools as pool_svc

bp = Blueprint("jobs", __name__)


def _page(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], d.v1Pagination]:
    offset = int_arg("offset", 0) or 0
    limit = int_arg("limit", 0) or 0
    page = rows[offset : (offset + limit) if limit > 0 else None]
    return page, pagination(offset, limit, len(rows))


def _jobs() -> list[dict[str, Any]]:
    desc = request.args.get("orderBy") in ("ORDER_BY_DESC", "2")
    with db() as conn:
        return svc.list_jobs(conn, state(), request.args.get("resourcePool"), desc)


@bp.get("/api/v1/job-queues")
def list_v1() -> Any:
    page, pag = _page(_jobs())
    return {"jobs": [svc.job_json(r) for r in page], "pagination": pag}


@bp.get("/api/v1/job-queues-v2")
def list_v2() -> Any:
    page, pag = _page(_jobs())
    return {"jobs": [{"full": svc.job_json(r)} for r in page], "pagination": pag}


@bp.post("/api/v1/job-queues")
def update() -> Any:
    updates = body().get("updates")
    if not isinstance(updates, list) or not updates:
        raise InvalidArgument("updates: required non-empty list")
    with db() as conn:
        for i, u in enumerate(updates):
            if not isinstance(u, dict) or not isinstance(u.get("jobId"), str):
                raise InvalidArgument(f"updates[{i}].jobId: required string")
            _access.job(conn, u["jobId"])
            svc.update(
                conn,
                u["jobId"],
                priority=u.get("priority"),
                weight=u.get("weight"),
                resource_pool=u.get("resourcePool"),
                ahead_of=u.get("aheadOf"),
                behind_of=u.get("behindOf"),
                st=state(),
            )
    return {}


@bp.get("/api/v1/resource-pools")
def resource_pools() -> Any:
    with db() as conn:
        pools = pool_svc.list_pools(conn, state())
    return {"resourcePools": pools, "pagination": pagination(0, 0, len(pools))}
