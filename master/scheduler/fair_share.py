"""The fair-share scheduler: the pool's slots divided among jobs by weight, in whole gangs.

Determined (``agentrm/fair_share.go``) gives each job a slot offer by weighted max-min
progressive filling, then starts pending tasks that fit in a job's offer and releases running
tasks of jobs above their offer. Offers are computed in slots while tasks are gangs, so it needs
a fix-up for offers too small to start anything. We compute the same max-min shares directly in
gangs, which needs no fix-up:

1. Capacity is every slot of the schedulable agents plus slots held on the others.
2. Non-preemptible running requests are granted first. Then, repeatedly, the job with the least
   granted slots per unit of weight (ties: the earlier-submitted job) is granted its next
   request: its running ones first (oldest first), then its pending ones in submission order. A
   request larger than the capacity left is skipped (the job may still get a smaller one). A
   pending request the pool could never hold, even empty, is not counted (it would waste share).
3. Granted pending requests are placed in grant order. One that does not fit looks for victims
   among running requests that were *not* granted (over-share jobs), most recently started
   first, after any
   already stopping; only the victims it needs are preempted, and its slots are held for it.
4. If nothing had to be preempted, pending requests that were not granted may use slots that
   are still free (work-conserving); a later pass takes them back if a granted request needs
   the room.

A job at its ``max_slots`` (``caps``) is granted no more pending requests, and is not given
free slots in step 4: the share it leaves goes to the other jobs.

Zero-slot requests are not part of the share: they are placed FIFO (see ``core``).
The queue order is the grant order, then the ungranted requests in submission order.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import Counter
from collections.abc import Sequence

from det.master.scheduler.capacity import fits_sizes
from det.master.scheduler.caps import JobCaps
from det.master.scheduler.fitting import Cluster
from det.master.scheduler.model import PassResult, Request


@dataclasses.dataclass
class _Job:
    job_id: str
    weight: float
    first: float
    queue: list[Request] = dataclasses.field(default_factory=list)
    granted: int = 0
    next: int = 0


def schedule_fair_share(
    requests: Sequence[Request], cluster: Cluster, caps: JobCaps | None = None
) -> PassResult:
    """One pass over the pool's slot-holding requests (sorted by ``order``)."""
    caps = caps if caps is not None else JobCaps(requests)
    granted = _grant(requests, cluster, caps)
    granted_ids = {r.allocation_id for r in granted}
    rest = [r for r in requests if r.allocation_id not in granted_ids]
    out = PassResult(order=granted + rest)
    # Victims: requests already stopping first, then running requests beyond their job's
    # share, most recently started first.
    stopping = [r for r in requests if r.placement is not None and r.preempting]
    over = [r for r in rest if r.placement is not None and r.preemptible and not r.preempting]
    candidates = stopping + sorted(over, key=lambda r: (-r.started, -r.order, r.allocation_id))
    taken: set[str] = set()
    for r in granted:
        if r.placement is not None:
            continue
        fit = cluster.find(r.slots)
        if fit is not None:
            out.placements[r.allocation_id] = cluster.take(fit)
            continue
        found = cluster.find_with_victims(
            r.slots, (c for c in candidates if c.allocation_id not in taken)
        )
        if found is None:
            caps.release(r)  # granted, but it waits for room like any other
            continue
        fit, victims = found
        cluster.reserve(fit, victims)
        taken.update(v.allocation_id for v in victims)
        out.preemptions.extend(v.allocation_id for v in victims if not v.preempting)
        out.waiting.append(r.allocation_id)
    if not out.preemptions:
        for r in rest:
            if r.placement is None and caps.allows(r):
                fit = cluster.find(r.slots)
                if fit is not None:
                    out.placements[r.allocation_id] = cluster.take(fit)
                    caps.take(r)
    return out


def _grant(requests: Sequence[Request], cluster: Cluster, caps: JobCaps) -> list[Request]:
    """The requests that fit in their job's weighted max-min share (and its cap), in grant
    order; a granted pending request counts against its job's cap from here on."""
    capacity = sum(cluster.total[a] for a in cluster.total if cluster.usable(a))
    for r in requests:
        if r.placement is not None and not r.preempting:
            capacity += sum(
                len(ids) for a, ids in (r.placement or {}).items() if not cluster.usable(a)
            )
    sizes: Counter[int] = Counter(cluster.total[a] for a in cluster.total if cluster.usable(a))
    jobs: dict[str, _Job] = {}
    granted: list[Request] = []
    for r in requests:
        if r.placement is not None and r.preempting:
            continue  # on its way out: neither holds share nor is granted
        if r.placement is None and not fits_sizes(r.slots, sizes):
            continue
        job = jobs.get(r.job_id)
        if job is None:
            job = jobs[r.job_id] = _Job(r.job_id, max(r.weight, 1e-9), r.order)
        if r.placement is not None and not r.preemptible:
            job.granted += r.slots
            capacity -= r.slots
            granted.append(r)
        else:
            job.queue.append(r)
    for job in jobs.values():
        # Running requests keep their place ahead of pending ones, earliest started first.
        job.queue.sort(key=lambda r: (r.placement is None, r.started, r.order, r.allocation_id))
    heap = [(j.granted / j.weight, j.first, j.job_id) for j in jobs.values() if j.queue]
    heapq.heapify(heap)
    while heap and capacity > 0:
        _, first, job_id = heapq.heappop(heap)
        job = jobs[job_id]
        while job.next < len(job.queue):
            r = job.queue[job.next]
            job.next += 1
            if r.placement is None and not caps.allows(r):
                continue
            if r.slots <= capacity:
                if r.placement is None:
                    caps.take(r)
                granted.append(r)
                job.granted += r.slots
                capacity -= r.slots
                break
        if job.next < len(job.queue):
            heapq.heappush(heap, (job.granted / job.weight, first, job_id))
    return granted
