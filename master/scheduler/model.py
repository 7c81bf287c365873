"""The scheduler's inputs and outputs: frozen snapshots in, a frozen decision out."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import NamedTuple

DEFAULT_PRIORITY = 42
MIN_PRIORITY = 1  # runs first
MAX_PRIORITY = 99  # runs last

#: ``{agent id: slot ids}``; a zero-slot task maps its agent to ``()``.
Placement = Mapping[str, tuple[str, ...]]


class PolicyKind(enum.StrEnum):
    PRIORITY = "priority"
    FAIR_SHARE = "fair_share"
    # Determined's deprecated round-robin: submission order, priorities ignored, no preemption.
    ROUND_ROBIN = "round_robin"


class FittingPolicy(enum.StrEnum):
    BEST = "best"  # the agent with the fewest free slots that still fits
    WORST = "worst"  # the agent with the most free slots


class QueueState(enum.StrEnum):
    """Determined's job queue states (the wire adds ``STATE_``)."""

    QUEUED = "QUEUED"
    SCHEDULED = "SCHEDULED"


@dataclasses.dataclass(frozen=True)
class AgentState:
    """One connected agent of the pool.

    ``slot_ids`` are the agent's enabled slots (``()`` for an agent that only hosts zero-slot
    tasks). Which slot is used by which allocation is not stored here: it is read from the
    ``placement`` of the pool's placed :class:`Request` s, so there is one source of truth.
    """

    id: str
    slot_ids: tuple[str, ...] = ()
    enabled: bool = True
    draining: bool = False

    @property
    def slots(self) -> int:
        return len(self.slot_ids)

    @property
    def schedulable(self) -> bool:
        """Whether new work may be placed here (disabled and draining agents get none)."""
        return self.enabled and not self.draining

    @classmethod
    def with_slots(
        cls, id: str, slots: int, *, enabled: bool = True, draining: bool = False
    ) -> AgentState:
        """An agent whose slot ids are ``"0"`` … ``str(slots - 1)``."""
        return cls(id, tuple(str(i) for i in range(slots)), enabled, draining)


@dataclasses.dataclass(frozen=True)
class Request:
    """One allocation of the pool that has not terminated.

    ``slots``: what the gang needs, all or nothing. ``priority``: 1-99, lower runs first.
    ``weight``: the job's fair-share weight. ``order``: the submission order (the job's queue
    position, then the request's creation; smaller is earlier). ``placement``: where it runs
    when placed (``None`` while pending); placed requests are never moved. ``started``: when it
    was placed (any increasing number, e.g. epoch seconds); among victims of equal priority the
    most recently started goes first, then the latest ``order``. ``preempting``: the master
    already asked it to stop; its slots are on their way to being free. ``max_slots``: the
    job's cap on the slots its requests hold at once (``None`` or ``0``: none; see ``caps``).
    """

    allocation_id: str
    job_id: str
    slots: int
    priority: int = DEFAULT_PRIORITY
    weight: float = 1.0
    order: float = 0.0
    preemptible: bool = True
    placement: Placement | None = None
    preempting: bool = False
    started: float = 0.0
    max_slots: int | None = None

    @property
    def placed(self) -> bool:
        return self.placement is not None


@dataclasses.dataclass(frozen=True)
class Policy:
    """The pool's scheduler config (``resource_manager.scheduler`` or the pool's own)."""

    kind: str = PolicyKind.PRIORITY
    preemption: bool = False
    fitting: str = FittingPolicy.BEST


#: A pool's ``max_aux_containers_per_agent`` when master.yaml does not set it (Determined's):
#: how many zero-slot tasks one agent runs at once. Written here once; the master's config,
#: the provisioner and the services read it from here.
DEFAULT_MAX_AUX_CONTAINERS_PER_AGENT = 100


@dataclasses.dataclass(frozen=True)
class PoolSnapshot:
    """Everything one pass over one resource pool needs."""

    agents: tuple[AgentState, ...] = ()
    requests: tuple[Request, ...] = ()
    policy: Policy = Policy()
    max_aux_containers_per_agent: int = DEFAULT_MAX_AUX_CONTAINERS_PER_AGENT


# The two result rows below are NamedTuples rather than frozen dataclasses: a pass builds one
# per request (10,000+), and a NamedTuple is several times cheaper to build.
class QueueEntry(NamedTuple):
    """One request in queue order. ``jobs_ahead`` is its job's: how many distinct jobs come
    before the job's first request in this order (Determined's ``jobsAhead``)."""

    allocation_id: str
    job_id: str
    slots: int
    state: QueueState
    jobs_ahead: int


class JobSummary(NamedTuple):
    """One job in queue order: SCHEDULED when any of its requests is (Determined carries the
    highest state of a job's requests), and its slot counts."""

    job_id: str
    state: QueueState
    jobs_ahead: int
    requested_slots: int
    allocated_slots: int


@dataclasses.dataclass(frozen=True)
class Decision:
    """What the apply step does.

    ``placements``: pending allocation → ``{agent id: slot ids}`` to assign now.
    ``preemptions``: running allocations to stop gracefully (checkpoint, exit, re-queue) so
    higher-priority or under-share work can run; never one already ``preempting``.
    ``queue``: every request of the pool in the order the pass used, with its state after this
    decision. ``jobs``: the same reduced to jobs. ``waiting``: pending allocations for which
    slots are held back until preempted work exits (they are placed by a later pass).
    ``capped``: pending allocations left queued because their job is at its ``max_slots``.
    """

    placements: Mapping[str, Placement] = dataclasses.field(default_factory=dict)
    preemptions: tuple[str, ...] = ()
    queue: tuple[QueueEntry, ...] = ()
    jobs: tuple[JobSummary, ...] = ()
    waiting: tuple[str, ...] = ()
    capped: tuple[str, ...] = ()

    def demand(self) -> tuple[int, ...]:
        """Slot counts of the requests left queued that are not waiting for preempted work nor
        held back by their job's cap: what the provisioner may need more machines for (0 for a
        zero-slot task)."""
        waiting = set(self.waiting) | set(self.capped)
        return tuple(
            e.slots
            for e in self.queue
            if e.state == QueueState.QUEUED and e.allocation_id not in waiting
        )

    def slot_counts(self) -> dict[str, dict[str, int]]:
        """``placements`` as ``{allocation id: {agent id: slot count}}``."""
        return {a: {ag: len(s) for ag, s in p.items()} for a, p in self.placements.items()}


@dataclasses.dataclass
class PassResult:
    """A policy's raw output inside one pass (mutable, never leaves the package).

    ``order``: the slot-holding requests in the order the pass considered them (the queue)."""

    order: list[Request] = dataclasses.field(default_factory=list)
    placements: dict[str, Placement] = dataclasses.field(default_factory=dict)
    preemptions: list[str] = dataclasses.field(default_factory=list)
    waiting: list[str] = dataclasses.field(default_factory=list)
