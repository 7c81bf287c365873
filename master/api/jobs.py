"""Job queues (v1 and v2) and resource pools."""

from __future__ import annotations

from flask import Blueprint

from det.master.api import _access
from det.master.api._common import db, pagination, state
from det.master.api._contract import contract
from det.master.errors import InvalidArgument
from det.master.schemas import d
from det.master.schemas import jobs as wire
from det.master.schemas.requests import JobsQuery
from det.master.services import jobs as svc
from det.master.services import pools as pool_svc
from det.master.wire import Empty, Paging

bp = Blueprint("jobs", __name__)


def _jobs(params: JobsQuery) -> tuple[list[wire.Job], d.v1Pagination]:
    desc = params.orderBy == "ORDER_BY_DESC"
    with db() as conn:
        rows = svc.list_jobs(conn, state(), params.resourcePool, desc)
    jobs = [wire.job(r) for r in rows]
    wanted = set(params.states)
    if wanted:
        jobs = [j for j in jobs if (s := j.get("summary")) is not None and s["state"] in wanted]
    offset, limit = params.offset, params.limit
    page = jobs[offset : (offset + limit) if limit > 0 else None]
    return page, pagination(offset, limit, len(jobs))


@bp.get("/api/v1/job-queues")
@contract("GetJobs", params=JobsQuery, response=wire.GetJobsResponse)
def list_v1(params: JobsQuery) -> wire.GetJobsResponse:
    page, pag = _jobs(params)
    return {"jobs": page, "pagination": pag}


@bp.get("/api/v1/job-queues-v2")
@contract("GetJobsV2", params=JobsQuery, response=wire.GetJobsV2Response)
def list_v2(params: JobsQuery) -> wire.GetJobsV2Response:
    page, pag = _jobs(params)
    return {"jobs": [{"full": j} for j in page], "pagination": pag}


@bp.post("/api/v1/job-queues")
@contract("UpdateJobQueue")
def update(body: d.v1UpdateJobQueueRequest) -> Empty:
    updates = body.get("updates")
    if not updates:
        raise InvalidArgument("updates: required non-empty list")
    with db() as conn:
        for i, u in enumerate(updates):
            job_id = u.get("jobId")
            if not job_id:
                raise InvalidArgument(f"updates[{i}].jobId: required string")
            _access.job(conn, job_id)
            svc.update(
                conn,
                job_id,
                priority=u.get("priority"),
                weight=u.get("weight"),
                resource_pool=u.get("resourcePool"),
                ahead_of=u.get("aheadOf"),
                behind_of=u.get("behindOf"),
                st=state(),
            )
    return {}


@bp.get("/api/v1/resource-pools")
@contract("GetResourcePools")
def resource_pools(params: d.GetResourcePoolsParams) -> d.v1GetResourcePoolsResponse:
    with db() as conn:
        pools = pool_svc.list_pools(conn, state())
    offset, limit = Paging.of(params)
    page = pools[offset : (offset + limit) if limit > 0 else None]
    return {"resourcePools": page, "pagination": pagination(offset, limit, len(pools))}
