"""The scheduling pass: snapshot a pool from the database, let the pure scheduler decide, apply
placements and preemptions with guarded updates (a placement only lands on a still-PENDING
allocation, so a stale decision can never double-book)."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, replace

from psycopg.rows import class_row
from typing_extensions import TypedDict

from det.master import db, states
from det.master import scheduler as sched
from det.master.config import SchedulerConfig
from det.master.db import Conn
from det.master.errors import InvalidArgument
from det.master.handles import MasterState
from det.master.scheduler.fitting import why_waiting
from det.master.scheduler.model import DEFAULT_MAX_AUX_CONTAINERS_PER_AGENT
from det.master.services import containers

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AgentRow:
    """A connected agent of the pool, as the snapshot reads it."""

    id: str
    enabled: bool
    draining: bool
    #: Its enabled slots, by id (None: it has none).
    slots: list[str] | None


@dataclass(frozen=True, slots=True)
class RequestRow:
    """An allocation of the pool that has not ended, with its job's queue fields."""

    id: str
    job_id: str
    slots_needed: int
    state: str
    placement: dict[str, list[str]] | None
    created_at: dt.datetime
    placed_at: dt.datetime | None
    preempt_requested: bool
    priority: int
    weight: float
    queue_key: float
    #: Its experiment's ``resources.max_slots`` (None: none, or not an experiment's).
    max_slots: int | None


class QueueInfo(TypedDict):
    """A job's place in its pool's queue as the scheduler's decision has it."""

    state: str
    jobsAhead: int
    position: int
    #: Why its requests wait while slots are free (its max_slots), or None.
    capped: str | None
    #: Why its first waiting gang does not fit the pool's agents now
    #: (:func:`det.master.scheduler.fitting.why_waiting`), or None.
    waiting: str | None


def _pool_policy(st: MasterState, pool: str) -> SchedulerConfig:
    cfg = st.config.pool(pool)
    s = (cfg.scheduler if cfg and cfg.scheduler else None) or st.config.resource_manager.scheduler
    return s


def snapshot(conn: Conn, st: MasterState, pool: str) -> sched.PoolSnapshot:
    """Loads the pool's agents and requests into the scheduler's frozen snapshot."""
    agent_rows = (
        conn.cursor(row_factory=class_row(AgentRow))
        .execute(
            "SELECT a.id, a.enabled, a.draining, array_agg(s.slot_id ORDER BY s.slot_id) FILTER (WHERE s.enabled) AS slots"
            " FROM agents a LEFT JOIN slots s ON s.agent_id = a.id"
            " WHERE a.resource_pool = %s AND a.connected GROUP BY a.id ORDER BY a.id",
            (pool,),
        )
        .fetchall()
    )
    alloc_rows = (
        conn.cursor(row_factory=class_row(RequestRow))
        .execute(
            "SELECT a.id, a.job_id, a.slots_needed, a.state, a.placement, a.created_at, a.placed_at, a.preempt_requested,"
            " j.priority, j.weight, j.queue_key,"
            " (SELECT (e.config #>> '{resources,max_slots}')::bigint FROM experiments e"
            "   WHERE e.id = j.experiment_id) AS max_slots"
            " FROM allocations a JOIN jobs j ON j.id = a.job_id"
            " WHERE a.resource_pool = %s AND a.state <> 'TERMINATED' ORDER BY j.queue_key, a.created_at, a.id",
            (pool,),
        )
        .fetchall()
    )
    cfg = st.config.pool(pool)
    return sched_snapshot(
        agent_rows,
        alloc_rows,
        _pool_policy(st, pool),
        cfg.max_aux_containers_per_agent if cfg else DEFAULT_MAX_AUX_CONTAINERS_PER_AGENT,
    )


def sched_snapshot(
    agent_rows: list[AgentRow],
    alloc_rows: list[RequestRow],
    policy: SchedulerConfig,
    max_aux: int,
) -> sched.PoolSnapshot:
    agents = []
    for a in agent_rows:
        agents.append(
            sched.AgentState(
                id=a.id,
                slot_ids=tuple(a.slots or ()),
                enabled=a.enabled,
                draining=a.draining,
            )
        )
    requests = []
    for i, r in enumerate(alloc_rows):
        placement = r.placement or {}
        requests.append(
            sched.Request(
                allocation_id=r.id,
                job_id=r.job_id,
                slots=r.slots_needed,
                priority=r.priority,
                weight=float(r.weight),
                order=float(i),  # submission order: the job's queue position, then creation
                preemptible=True,
                placement={k: tuple(v) for k, v in placement.items()} if placement else None,
                preempting=bool(r.preempt_requested),
                started=r.placed_at.timestamp() if r.placed_at else 0.0,
                max_slots=r.max_slots,
            )
        )
    return sched.PoolSnapshot(
        agents=tuple(agents),
        requests=tuple(requests),
        policy=sched.Policy(
            kind=policy.type, preemption=policy.preemption, fitting=policy.fitting_policy
        ),
        max_aux_containers_per_agent=max_aux,
    )


def schedule_all(conn: Conn, st: MasterState) -> None:
    for p in st.config.resource_pools:
        # Placements and preemptions are decided for requests that wait (a preemption makes
        # room for one): with none, the decision is empty, and the snapshot (every agent, slot
        # and running allocation of the pool) is not read at each tick.
        if not db.exists(
            conn,
            "SELECT 1 FROM allocations WHERE resource_pool = %s AND state = %s LIMIT 1",
            (p.pool_name, states.PENDING),
        ):
            continue
        decision = sched.schedule(snapshot(conn, st, p.pool_name))
        moved = states.allocations_placed(conn, decision.placements)
        containers.choose_port_offsets(conn, {a: decision.placements[a] for a in moved})
        for allocation_id in decision.preemptions:
            conn.execute(
                "UPDATE allocations SET preempt_requested = true, exit_reason = coalesce(exit_reason, 'preempted by higher-priority work')"
                " WHERE id = %s AND state <> 'TERMINATED' AND NOT preempt_requested",
                (allocation_id,),
            )


def queue_view(conn: Conn, st: MasterState, pool: str | None) -> dict[str, QueueInfo]:
    """Per job: its queue state and jobsAhead, from the scheduler's decision on a fresh snapshot,
    and ``capped`` (a reason) when requests of it wait only because it is at its max_slots."""
    out: dict[str, QueueInfo] = {}
    for p in st.config.resource_pools:
        if pool and p.pool_name != pool:
            continue
        snap = snapshot(conn, st, p.pool_name)
        decision = sched.schedule(snap)
        for position, job in enumerate(decision.jobs):
            out[job.job_id] = {
                "state": str(job.state),
                "jobsAhead": job.jobs_ahead,
                "position": position,
                "capped": None,
                "waiting": None,
            }
        # Room as it will be once this decision's placements apply; a request waiting for
        # preempted work to exit or held by its job's cap has its own reason.
        placed = [
            replace(r, placement=decision.placements[r.allocation_id])
            if r.allocation_id in decision.placements
            else r
            for r in snap.requests
            if r.placement is not None or r.allocation_id in decision.placements
        ]
        held_back = set(decision.waiting) | set(decision.capped) | set(decision.placements)
        for r in snap.requests:
            q = out.get(r.job_id)
            if r.placement is not None or r.allocation_id in held_back:
                continue
            if q and q["state"] == "QUEUED" and q["waiting"] is None:
                q["waiting"] = why_waiting(snap.agents, placed, r.slots)
        held = set(decision.capped)
        by_id = {j.job_id: j for j in decision.jobs} if held else {}
        for r in snap.requests:
            if r.allocation_id in held and r.job_id in by_id:
                job = by_id[r.job_id]
                out[r.job_id]["capped"] = (
                    f"at its resources.max_slots: {job.allocated_slots} of {r.max_slots} slots"
                    " in use; its other trials wait until one of its own finishes"
                    " (raise it with `det e set max-slots`)"
                )
    return out


def refuse_if_never_fits(
    conn: Conn,
    st: MasterState,
    pool: str | None,
    slots: int,
    field: str = "resources.slots_per_trial",
) -> None:
    """A job of ``slots`` slots per gang that could never be scheduled in ``pool`` is refused
    at creation, with the reason (``field`` names the setting in the user's config)."""
    cfg = st.config.pool(pool) if pool else None
    if cfg is None:
        return
    agent_slots = db.column(
        conn,
        int,
        "SELECT count(s.slot_id) AS n FROM agents a LEFT JOIN slots s ON s.agent_id = a.id AND s.enabled"
        " WHERE a.resource_pool = %s AND a.connected GROUP BY a.id",
        (pool,),
    )
    growth = None
    provider = cfg.provider_config
    if not agent_slots and provider is None:
        return  # a static pool whose agents have not registered yet: the job waits for them
    if provider is not None:
        policy = provider.scale_policy()
        growth = (policy.max_instances, max((o.slots for o in policy.options), default=0))
    reason = sched.can_ever_fit(slots, tuple(agent_slots), growth)
    if reason:
        raise InvalidArgument(f"{field}: {reason}")
