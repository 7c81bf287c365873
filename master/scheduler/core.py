"""One scheduling pass over one pool: :func:`schedule`."""

from __future__ import annotations

import logging
import operator
from collections.abc import Sequence

from det.master.scheduler.caps import JobCaps
from det.master.scheduler.fair_share import schedule_fair_share
from det.master.scheduler.fitting import Cluster
from det.master.scheduler.model import (
    Decision,
    JobSummary,
    Placement,
    PolicyKind,
    PoolSnapshot,
    QueueEntry,
    QueueState,
    Request,
)
from det.master.scheduler.priority import schedule_priority, sort_key

logger = logging.getLogger(__name__)


def schedule(snapshot: PoolSnapshot) -> Decision:
    """Decides placements and preemptions for one pool. Pure and deterministic: the same
    snapshot always gives the same decision (ties are broken by order, then by id)."""
    policy = snapshot.policy
    requests = snapshot.requests
    cluster = Cluster(
        snapshot.agents,
        [r for r in requests if r.placement is not None],
        policy.fitting,
        snapshot.max_aux_containers_per_agent,
    )
    caps = JobCaps(requests)
    if policy.kind == PolicyKind.FAIR_SHARE:
        fifo = sorted(requests, key=operator.attrgetter("order", "allocation_id"))
        result = schedule_fair_share([r for r in fifo if r.slots > 0], cluster, caps)
        # Determined's fair share places zero-slot tasks FIFO, outside the share.
        zero = [r for r in fifo if r.slots == 0]
        order = result.order + zero
    elif policy.kind in (PolicyKind.PRIORITY, PolicyKind.ROUND_ROBIN):
        order = sorted(requests, key=sort_key(policy.kind))
        result = schedule_priority(
            [r for r in order if r.slots > 0], cluster, policy.kind, policy.preemption, caps
        )
        # Zero-slot tasks are scheduled independently of slot-holding ones (as Determined):
        # a pending gang never holds up a notebook or a TensorBoard, nor the reverse.
        zero = [r for r in order if r.slots == 0]
    else:
        raise ValueError(f"unknown scheduler type {policy.kind!r}")
    placements: dict[str, Placement] = dict(result.placements)
    for r in zero:
        if r.placed:
            continue
        where = cluster.place_aux()
        if where is None:
            break  # every schedulable agent is at max_aux_containers_per_agent
        placements[r.allocation_id] = where
    queue, jobs = _queue(order, placements)
    waiting = set(result.waiting)
    capped = tuple(
        r.allocation_id
        for r in order
        if r.placement is None
        and r.allocation_id not in placements
        and r.allocation_id not in waiting
        and not caps.allows(r)
    )
    if placements or result.preemptions:
        logger.debug(
            "scheduling pass: %d placed, %d to preempt, %d waiting for preemptions",
            len(placements),
            len(result.preemptions),
            len(result.waiting),
        )
    return Decision(
        placements=placements,
        preemptions=tuple(result.preemptions),
        queue=queue,
        jobs=jobs,
        waiting=tuple(result.waiting),
        capped=capped,
    )


def _queue(
    order: Sequence[Request], placements: dict[str, Placement]
) -> tuple[tuple[QueueEntry, ...], tuple[JobSummary, ...]]:
    """Determined's job queue over the pass's order: a job's ``jobsAhead`` is the number of
    distinct jobs whose first request comes before its own first request."""
    position: dict[str, int] = {}
    requested: dict[str, int] = {}
    allocated: dict[str, int] = {}
    entries = []
    scheduled_, queued = QueueState.SCHEDULED, QueueState.QUEUED
    for r in order:
        job_id = r.job_id
        ahead = position.get(job_id)
        if ahead is None:
            ahead = position[job_id] = len(position)
            requested[job_id] = allocated[job_id] = 0
        requested[job_id] += r.slots
        if r.placement is not None or r.allocation_id in placements:
            allocated[job_id] += r.slots
            entries.append(QueueEntry(r.allocation_id, job_id, r.slots, scheduled_, ahead))
        else:
            entries.append(QueueEntry(r.allocation_id, job_id, r.slots, queued, ahead))
    scheduled_jobs = {e.job_id for e in entries if e.state is scheduled_}
    jobs = [
        JobSummary(
            job_id,
            scheduled_ if job_id in scheduled_jobs else queued,
            ahead,
            requested[job_id],
            allocated[job_id],
        )
        for job_id, ahead in position.items()
    ]
    return tuple(entries), tuple(jobs)
