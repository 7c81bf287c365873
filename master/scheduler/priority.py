"""The priority scheduler (and round-robin, its priority-blind variant).

Order: lower priority number first, then submission order (``order``), then allocation id.

Behaviour, as Determined 0.38 (``agentrm/priority.go``) and its docs define it:

* Within one priority level every pending request that fits is placed, in order: a gang that
  does not fit does not block smaller requests *of the same priority* behind it.
* Across levels it does block: once a level has a request that could not be placed, no request
  of a lower priority is placed in this pass ("while tasks of higher priority are pending, no
  lower priority tasks will be scheduled"). With preemption enabled Determined backfills lower
  levels with *preemptible* requests only (they can be taken back when the blocked request's
  slots appear); we do the same.
* With preemption enabled, a request that does not fit looks for victims among running
  preemptible requests of a strictly lower priority (a higher number): lowest priority first,
  then the most recently started (``started``, then ``order``). Allocations already asked to
  stop count first and are not asked again. Determined also preempts later jobs of the *same*
  priority; we do not, to avoid churn between equals. Unlike Determined's greedy walk, victims
  that turn out not to be needed (on other agents, or spare slots) are not preempted. The slots
  the waiting gang will use are held for it, so nothing of lower rank lands there before the
  victims exit.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterator, Sequence

from det.master.scheduler.caps import JobCaps
from det.master.scheduler.fitting import Cluster
from det.master.scheduler.model import PassResult, PolicyKind, Request


def sort_key(kind: str) -> Callable[[Request], tuple[float | str, ...]]:
    """The queue order of ``kind``: priority (unless round-robin), submission order, id."""
    if kind == PolicyKind.ROUND_ROBIN:
        return operator.attrgetter("order", "allocation_id")
    return operator.attrgetter("priority", "order", "allocation_id")


def schedule_priority(
    requests: Sequence[Request],
    cluster: Cluster,
    kind: str,
    preemption: bool,
    caps: JobCaps | None = None,
) -> PassResult:
    """One pass over the pool's slot-holding requests. ``requests`` must be sorted by
    :func:`sort_key`; the result's ``order`` is that same order. A request whose job is at its
    cap (``caps``) is passed over: it neither blocks the levels below nor preempts."""
    caps = caps if caps is not None else JobCaps(requests)
    preemption = preemption and kind == PolicyKind.PRIORITY
    out = PassResult(order=list(requests))
    pending = [r for r in requests if r.placement is None]
    candidates = _victim_order(requests) if preemption else []
    taken: set[str] = set()
    failed_sizes: set[int] = set()  # gang sizes no victim set could make room for
    blocked = False
    start = 0

    def level_of(r: Request) -> int:
        return 0 if kind == PolicyKind.ROUND_ROBIN else r.priority

    for _, level in itertools.groupby(pending, key=level_of):
        unplaced: list[Request] = []
        for r in level:
            if blocked and not (preemption and r.preemptible):
                continue
            if not caps.allows(r):
                continue
            fit = cluster.find(r.slots)
            if fit is None:
                unplaced.append(r)
            else:
                out.placements[r.allocation_id] = cluster.take(fit)
                caps.take(r)
        if not unplaced:
            continue
        blocked = True
        if not preemption:
            break
        for r in unplaced:
            # The pool only fills up as the pass goes on, and later requests have fewer
            # victims to choose from, so a size that failed once fails for the rest.
            if r.slots in failed_sizes or not caps.allows(r):
                continue
            # Victims are mostly taken from the front: skip the taken prefix once, not per search.
            while start < len(candidates) and candidates[start].allocation_id in taken:
                start += 1
            eligible = _eligible(candidates, start, taken, r.priority)
            found = cluster.find_with_victims(r.slots, eligible)
            if found is None:
                failed_sizes.add(r.slots)
                continue
            fit, victims = found
            cluster.reserve(fit, victims)
            caps.take(r)
            taken.update(v.allocation_id for v in victims)
            out.preemptions.extend(v.allocation_id for v in victims if not v.preempting)
            out.waiting.append(r.allocation_id)
    return out


def _victim_order(requests: Sequence[Request]) -> list[Request]:
    """Running requests in the order we would rather stop them: those already stopping, then
    preemptible ones from the lowest priority (highest number), most recently started first."""
    running = [r for r in requests if r.placement is not None and r.slots > 0]
    stopping = [r for r in running if r.preempting]
    others = [r for r in running if r.preemptible and not r.preempting]
    others.sort(key=lambda r: (-r.priority, -r.started, -r.order, r.allocation_id))
    return stopping + others


def _eligible(
    candidates: list[Request], start: int, taken: set[str], priority: int
) -> Iterator[Request]:
    for i in range(start, len(candidates)):
        c = candidates[i]
        if c.allocation_id in taken:
            continue
        if not c.preempting and c.priority <= priority:
            return  # sorted by descending priority number: nothing further is eligible
        yield c
