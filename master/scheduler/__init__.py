"""The scheduler: one resource pool's snapshot in, placements and preemptions out. Pure.

No database, clock, network or Docker here: the master's control loop loads a
:class:`PoolSnapshot`, calls :func:`schedule`, and applies the :class:`Decision` (guarded
updates, so a stale decision cannot double-book a slot).

Public API::

    schedule(snapshot: PoolSnapshot) -> Decision
    can_ever_fit(slots_needed: int,
                 agents: Sequence[int] | Sequence[AgentState],
                 growth: tuple[int, int] | None = None) -> str | None

    PoolSnapshot(agents: tuple[AgentState, ...], requests: tuple[Request, ...],
                 policy: Policy,
                 max_aux_containers_per_agent: int = DEFAULT_MAX_AUX_CONTAINERS_PER_AGENT)
    AgentState(id, slot_ids: tuple[str, ...] = (), enabled=True, draining=False)
        AgentState.with_slots(id, n) numbers the slots "0".."n-1"
    Request(allocation_id, job_id, slots, priority=42, weight=1.0, order=0.0,
            preemptible=True, placement: {agent id: (slot id, ...)} | None = None,
            preempting=False, started=0.0, max_slots=None)
    Policy(kind="priority" | "fair_share" | "round_robin", preemption=False,
           fitting="best" | "worst")

    Decision.placements   {allocation id: {agent id: (slot id, ...)}}  (zero-slot: ())
    Decision.preemptions  (allocation id, ...): stop gracefully, then re-queue
    Decision.queue        (QueueEntry(allocation_id, job_id, slots, state, jobs_ahead), ...)
    Decision.jobs         (JobSummary(job_id, state, jobs_ahead, requested_slots,
                           allocated_slots), ...): the queue reduced to jobs
    Decision.waiting      pending allocations whose slots are held until victims exit
    Decision.capped       pending allocations held back by their job's max_slots
    Decision.slot_counts() {allocation id: {agent id: slot count}}
    Decision.demand()      slot counts still queued, not waiting nor capped: the provisioner's
                           demand

Semantics, in short (each module's docstring has the details and where we differ from
Determined 0.38):

* Which slots are used comes from the placed requests' ``placement``; placed requests are
  never moved. Disabled or draining agents get nothing new.
* Gangs: all slots or none; one agent (best fit by default) or whole idle agents of one size
  that divides the request (:mod:`.fitting`).
* ``priority`` (:mod:`.priority`): lower number first, then ``order``; no blocking within a
  priority, but a blocked level stops lower levels (with preemption, only preemptible requests
  backfill). Preemption frees just enough, lowest priority and latest first.
* ``fair_share`` (:mod:`.fair_share`): weighted max-min shares computed in whole gangs.
* Zero-slot requests are placed apart, on the agent with the fewest aux containers, up to
  ``max_aux_containers_per_agent`` (agents with no slots count); they neither preempt nor are
  preempted by the scheduler.
* ``queue``/``jobs`` follow the order the pass used; ``jobs_ahead`` is Determined's
  ``jobsAhead`` (distinct jobs ahead); a job is SCHEDULED when any of its requests is.
* ``max_slots`` (:mod:`.caps`): a job at its cap gets nothing more placed; its pending
  requests are ``capped``, wait without blocking others or preempting, and add no demand.
* :func:`can_ever_fit` explains why a request could never be placed (:mod:`.capacity`); a
  pool with neither agents nor a provider gets ``None`` (its agents may not have registered).
"""

from det.master.scheduler.capacity import Growth, can_ever_fit, fits_sizes, pool_sizes
from det.master.scheduler.core import schedule
from det.master.scheduler.model import (
    DEFAULT_MAX_AUX_CONTAINERS_PER_AGENT,
    DEFAULT_PRIORITY,
    MAX_PRIORITY,
    MIN_PRIORITY,
    AgentState,
    Decision,
    FittingPolicy,
    JobSummary,
    Placement,
    Policy,
    PolicyKind,
    PoolSnapshot,
    QueueEntry,
    QueueState,
    Request,
)

__all__ = [
    "DEFAULT_MAX_AUX_CONTAINERS_PER_AGENT",
    "DEFAULT_PRIORITY",
    "MAX_PRIORITY",
    "MIN_PRIORITY",
    "AgentState",
    "Decision",
    "FittingPolicy",
    "Growth",
    "JobSummary",
    "Placement",
    "Policy",
    "PolicyKind",
    "PoolSnapshot",
    "QueueEntry",
    "QueueState",
    "Request",
    "can_ever_fit",
    "fits_sizes",
    "pool_sizes",
    "schedule",
]
