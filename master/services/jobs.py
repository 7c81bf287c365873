"""The job queue: one job per experiment or interactive task, ordered by priority then
``queue_key``. A paused experiment is left out while it asks for no slots, as Determined's
queue (built from the resource manager's requests) leaves it out.

What a job's queue state and ``jobsAhead`` are is never stored: it is what the scheduler's own
decision over the current snapshot says (``scheduling.queue_view``), so the queue the user sees is
the order the scheduler uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg.rows import class_row

from det.master import authz, db, states
from det.master.db import Conn
from det.master.errors import InvalidArgument, NotFound
from det.master.handles import MasterState
from det.master.rows.jobs import Job, ListedJob
from det.master.schemas.jobs import job as job_json  # the wire shape of a listed job
from det.master.services import pool_bindings, scheduling
from det.master.services.provisioning import JOB_EVENT_CODES
from det.master.services.scheduling import QueueInfo

__all__ = ["PENDING_EVENT_KINDS", "Job", "job_json", "list_jobs", "queue_info", "update"]

# Provisioner events that explain why a queued job waits ("why is my job pending?").
PENDING_EVENT_KINDS = JOB_EVENT_CODES


@dataclass(frozen=True, slots=True)
class _Queued:
    """What moving a job in the queue reads of it (and of its neighbour)."""

    id: str
    priority: int
    queue_key: float


@dataclass(frozen=True, slots=True)
class _Pending:
    """A job's latest reason to wait (an ``events`` row of a :data:`PENDING_EVENT_KINDS`)."""

    entity_id: str
    message: str


def queue_info(conn: Conn, st: MasterState, pool: str | None = None) -> dict[str, QueueInfo]:
    return scheduling.queue_view(conn, st, pool)


def list_jobs(conn: Conn, st: MasterState, pool: str | None, desc: bool) -> list[Job]:
    info = queue_info(conn, st, pool)
    params: list[Any] = []
    clause = ""
    if pool:
        clause = " AND j.resource_pool = %s"
        params.append(pool)
    rows = (
        conn.cursor(row_factory=class_row(ListedJob))
        .execute(
            # An ended experiment's job is listed while its checkpoint GC task waits or runs,
            # as that task (Determined's TYPE_CHECKPOINT_GC job).
            f"SELECT j.id, CASE WHEN e.state IN {states.ENDED_SQL} THEN 'CHECKPOINT_GC'"
            " ELSE j.kind END AS kind, j.experiment_id, j.owner_id, j.resource_pool, j.priority,"
            " j.weight, j.queue_key, j.submitted_at, coalesce(e.name, n.description) AS name, e.state AS exp_state, e.progress,"
            " u.username, n.id AS ntsc_id,"
            " coalesce((SELECT p.workspace_id FROM projects p WHERE p.id = e.project_id),"
            "   n.workspace_id) AS workspace_id,"
            " (SELECT coalesce(sum(a.slots_needed), 0) FROM allocations a WHERE a.job_id = j.id"
            "   AND a.state NOT IN ('PENDING','TERMINATED')) AS allocated,"
            " (SELECT coalesce(sum(a.slots_needed), 0) FROM allocations a WHERE a.job_id = j.id"
            "   AND a.state <> 'TERMINATED') AS requested"
            " FROM jobs j LEFT JOIN experiments e ON e.id = j.experiment_id"
            " LEFT JOIN ntsc_tasks n ON n.job_id = j.id JOIN users u ON u.id = j.owner_id"
            f" WHERE ((e.state NOT IN {states.ENDED_SQL} AND NOT e.deleted AND NOT e.unmanaged)"
            "   OR n.state = 'ACTIVE'"
            "   OR (e.id IS NOT NULL AND EXISTS (SELECT 1 FROM allocations g WHERE g.job_id = j.id"
            "     AND g.kind = 'CHECKPOINT_GC' AND g.state <> 'TERMINATED')))" + clause,
            params,
        )
        .fetchall()
    )
    reasons = {
        e.entity_id: e.message
        for e in db.fetch_rows(
            conn,
            _Pending,
            "SELECT DISTINCT ON (entity_id) entity_id, message FROM events"
            " WHERE entity = 'job' AND kind = ANY(%s) AND created_at > now() - interval '10 minutes'"
            " ORDER BY entity_id, id DESC",
            (list(PENDING_EVENT_KINDS),),
        )
    }
    out: list[Job] = []
    for r in rows:
        if r["exp_state"] == states.PAUSED and not r["requested"]:
            # As Determined's queue: a job is listed while it asks for slots; a paused
            # experiment asks for none (its trials let go of theirs). Its row keeps its priority
            # and place, so it returns there when activated, and `det job update` still works.
            continue
        # Why it waits, while it waits for any slots: a search with one trial running and the
        # next held by the cost cap still says so.
        waits = r["allocated"] < r["requested"]
        pending: str | None = reasons.get(r["id"]) if waits else None
        q = info.get(r["id"])
        if q and q["capped"]:
            pending = q["capped"]
        elif q and q["waiting"] and not pending:
            # No provisioner event says why: the room its gang needs (scheduling.queue_view).
            pending = q["waiting"]
        out.append(
            {
                **r,
                "pending_reason": pending,
                "queue_state": q["state"] if q else ("SCHEDULED" if r["allocated"] else "QUEUED"),
                "jobs_ahead": q["jobsAhead"] if q else 0,
                "position": q["position"] if q else 10**9,
            }
        )
    out.sort(key=lambda r: (r["priority"], r["queue_key"]), reverse=desc)
    return out


def _job(conn: Conn, job_id: str) -> _Queued:
    cur = conn.cursor(row_factory=class_row(_Queued))
    row = cur.execute(
        "SELECT id, priority, queue_key FROM jobs WHERE id = %s FOR NO KEY UPDATE", (job_id,)
    ).fetchone()
    if row is None:
        raise NotFound(f"job {job_id} not found")
    return row


def update(
    conn: Conn,
    job_id: str,
    *,
    priority: int | None = None,
    weight: float | None = None,
    resource_pool: str | None = None,
    ahead_of: str | None = None,
    behind_of: str | None = None,
    st: MasterState | None = None,
) -> None:
    _job(conn, job_id)  # locks the row; 404 if missing
    if priority is not None:
        if not isinstance(priority, int) or not 1 <= priority <= 99:
            raise InvalidArgument(f"priority: must be an integer from 1 to 99 (got {priority!r})")
        conn.execute("UPDATE jobs SET priority = %s WHERE id = %s", (priority, job_id))
    if weight is not None:
        if not isinstance(weight, (int, float)) or weight <= 0:
            raise InvalidArgument(f"weight: must be a positive number (got {weight!r})")
        conn.execute("UPDATE jobs SET weight = %s WHERE id = %s", (weight, job_id))
    if resource_pool is not None:
        if st is not None and st.config.pool(resource_pool) is None:
            raise InvalidArgument(f"resourcePool: no pool named '{resource_pool}'")
        if st is not None:  # the pool bindings of the job's workspace hold here too
            workspace_id = authz.workspace_of(conn, "job", job_id)
            pool_bindings.check(conn, st, resource_pool, workspace_id or 1, "resourcePool")
        conn.execute("UPDATE jobs SET resource_pool = %s WHERE id = %s", (resource_pool, job_id))
        conn.execute(
            "UPDATE allocations SET resource_pool = %s WHERE job_id = %s AND state = 'PENDING'",
            (resource_pool, job_id),
        )
    for target_id, ahead in ((ahead_of, True), (behind_of, False)):
        if target_id is None:
            continue
        target = _job(conn, target_id)
        keys = db.column(
            conn,
            float,
            "SELECT queue_key FROM jobs WHERE priority = %s AND id <> %s ORDER BY queue_key",
            (target.priority, job_id),
        )
        i = keys.index(target.queue_key)
        if ahead:
            neighbour = keys[i - 1] if i > 0 else target.queue_key - 2
        else:
            neighbour = keys[i + 1] if i + 1 < len(keys) else target.queue_key + 2
        conn.execute(
            "UPDATE jobs SET queue_key = %s, priority = %s WHERE id = %s",
            ((target.queue_key + neighbour) / 2, target.priority, job_id),
        )
    states.record_event(conn, "job", job_id, "update", "queue position or priority changed by user")
    conn.execute("NOTIFY det_wakeup")
