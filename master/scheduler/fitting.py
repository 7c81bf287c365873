"""Where a gang fits: the pass's working copy of the pool's free slots.

Gang rules (Determined's, kept): a request takes all its slots at once or none. It fits on one
agent when an agent has that many free slots (best fit: the fewest free slots that still fit;
worst fit: the most). Otherwise, and only for more than one slot, it may take *whole idle agents
of one size* whose size divides the request (8 slots on two idle 4-slot agents), preferring the
largest size so it spans as few agents as possible; never part of an agent. Disabled and
draining agents take nothing new.

Agents are bucketed by free-slot count, and idle agents by size, so a fit costs O(largest agent
size), not O(agents); ``bench/scheduler.py`` times a pass over 10,000 requests and 1,000 agents.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Sequence

from det.master.scheduler.model import (
    DEFAULT_MAX_AUX_CONTAINERS_PER_AGENT,
    AgentState,
    FittingPolicy,
    Placement,
    Request,
)

#: A fit: ``(agent id, slots taken there)`` per agent.
Fit = list[tuple[str, int]]


class Cluster:
    """Mutable, pass-local view of one pool's agents. Built from a snapshot, thrown away after."""

    def __init__(
        self,
        agents: Sequence[AgentState],
        placed: Iterable[Request],
        fitting: str = FittingPolicy.BEST,
        max_aux: int = DEFAULT_MAX_AUX_CONTAINERS_PER_AGENT,
    ) -> None:
        self.best = fitting != FittingPolicy.WORST
        self.max_aux = max_aux
        self.agents = {a.id: a for a in agents}
        used: dict[str, set[str]] = {}
        self.aux: dict[str, int] = dict.fromkeys(self.agents, 0)
        for r in placed:
            for agent_id, ids in (r.placement or {}).items():
                if not ids and r.slots == 0 and agent_id in self.aux:
                    self.aux[agent_id] += 1
                used.setdefault(agent_id, set()).update(ids)
        self.total: dict[str, int] = {}
        self.free_ids: dict[str, list[str]] = {}
        self.max_size = max((a.slots for a in agents), default=0)
        # buckets[n]: schedulable agents with n free slots (a dict used as an ordered set).
        self.buckets: list[dict[str, None]] = [{} for _ in range(self.max_size + 1)]
        # idle[size]: schedulable agents of that size with every slot free.
        self.idle: dict[int, dict[str, None]] = {}
        self._usable = {a.id for a in agents if a.schedulable and a.slots > 0}
        for a in agents:
            u = used.get(a.id, set())
            self.free_ids[a.id] = [s for s in a.slot_ids if s not in u]
            self.total[a.id] = a.slots
            if a.schedulable and a.slots > 0:
                self._index(a.id)
        self._aux_heap: list[tuple[int, str]] | None = None

    # -- indexes -----------------------------------------------------------------------------
    def free(self, agent_id: str) -> int:
        return len(self.free_ids.get(agent_id, ()))

    def usable(self, agent_id: str) -> bool:
        """Whether slot-holding work may be placed on the agent."""
        return agent_id in self._usable

    def _index(self, agent_id: str) -> None:
        n = self.free(agent_id)
        self.buckets[n][agent_id] = None
        if n == self.total[agent_id]:
            self.idle.setdefault(n, {})[agent_id] = None

    def _unindex(self, agent_id: str) -> None:
        n = self.free(agent_id)
        self.buckets[n].pop(agent_id, None)
        if n == self.total[agent_id]:
            self.idle.get(n, {}).pop(agent_id, None)

    # -- fitting -----------------------------------------------------------------------------
    def find(self, slots: int) -> Fit | None:
        """Where ``slots`` (> 0) fit now, without taking them; ``None`` when they do not."""
        if slots > self.max_size:
            return self._find_whole_agents(slots)
        order = (
            range(slots, self.max_size + 1) if self.best else range(self.max_size, slots - 1, -1)
        )
        for n in order:
            bucket = self.buckets[n]
            if bucket:
                return [(next(iter(bucket)), slots)]
        return self._find_whole_agents(slots)

    def _find_whole_agents(self, slots: int) -> Fit | None:
        if slots <= 1:
            return None
        for size in sorted(self.idle, reverse=True):
            agents = self.idle[size]
            if size and slots % size == 0 and len(agents) >= slots // size:
                return [(a, size) for a in itertools.islice(agents, slots // size)]
        return None

    def take(self, fit: Fit) -> dict[str, tuple[str, ...]]:
        """Takes the fit's slots (lowest free slot ids first) and returns the placement."""
        out: dict[str, tuple[str, ...]] = {}
        for agent_id, n in fit:
            self._unindex(agent_id)
            ids = self.free_ids[agent_id]
            out[agent_id] = tuple(ids[:n])
            del ids[:n]
            if self.usable(agent_id):
                self._index(agent_id)
        return out

    def hold(self, agent_id: str, n: int) -> None:
        """Marks ``n`` free slots used without placing anything (held for a preempting gang)."""
        if n > 0:
            self.take([(agent_id, min(n, self.free(agent_id)))])

    # -- zero-slot tasks -----------------------------------------------------------------------
    def place_aux(self) -> Placement | None:
        """A zero-slot task goes on the schedulable agent with the fewest aux containers, below
        ``max_aux_containers_per_agent``; ``None`` when every agent is full."""
        if self._aux_heap is None:
            self._aux_heap = [(n, a) for a, n in self.aux.items() if self.agents[a].schedulable]
            heapq.heapify(self._aux_heap)
        if not self._aux_heap or self._aux_heap[0][0] >= self.max_aux:
            return None
        n, agent_id = heapq.heappop(self._aux_heap)
        self.aux[agent_id] = n + 1
        heapq.heappush(self._aux_heap, (n + 1, agent_id))
        return {agent_id: ()}

    # -- preemption ----------------------------------------------------------------------------
    def find_with_victims(
        self, slots: int, candidates: Iterable[Request]
    ) -> tuple[Fit, list[Request]] | None:
        """The fewest victims, taken in ``candidates`` order, whose exit lets ``slots`` fit.

        Walks the candidates (most preferred victim first), counting their slots as free until
        the gang fits; then keeps only victims on the agents the gang would use, and on a single
        agent spares every victim it can, latest-preferred first. Nothing is changed.
        Call it only when :meth:`find` found nothing: each step checks just the agents the
        latest victim touched.
        """
        extra: dict[str, int] = {}
        by_agent: dict[str, list[Request]] = {}
        # fresh[size]: agents of that size made idle by the victims so far.
        fresh: dict[int, list[str]] = {}
        usable = self._usable
        for victim in candidates:
            best: tuple[int, str] | None = None
            whole: Fit | None = None
            for agent_id, ids in (victim.placement or {}).items():
                if not ids or agent_id not in usable:
                    continue
                n = extra[agent_id] = extra.get(agent_id, 0) + len(ids)
                by_agent.setdefault(agent_id, []).append(victim)
                free = len(self.free_ids[agent_id]) + n
                if free >= slots:
                    key = free if self.best else -free
                    if best is None or key < best[0]:
                        best = (key, agent_id)
                size = self.total[agent_id]
                if free == size and n == free - len(self.free_ids[agent_id]) and whole is None:
                    whole = self._whole_with(slots, size, agent_id, fresh)
            if best is not None:
                fit: Fit = [(best[1], slots)]
            elif whole is not None:
                fit = whole
            else:
                continue
            return fit, self._prune(slots, fit, by_agent)
        return None

    def _whole_with(
        self, slots: int, size: int, agent_id: str, fresh: dict[int, list[str]]
    ) -> Fit | None:
        """Records ``agent_id`` as made idle, then whether whole agents of its size now fit."""
        made = fresh.setdefault(size, [])
        if agent_id in made:
            return None
        made.append(agent_id)
        if slots <= size or slots % size:
            return None
        need = slots // size
        idle = self.idle.get(size, {})
        if len(idle) + len(made) < need:
            return None
        # Agents freed by victims first, so that the victims are actually needed.
        chosen = (made + list(idle))[:need]
        return [(a, size) for a in chosen]

    def _prune(self, slots: int, fit: Fit, by_agent: dict[str, list[Request]]) -> list[Request]:
        chosen = {a for a, _ in fit}
        victims: list[Request] = []
        seen: set[str] = set()
        for agent_id in chosen:
            for v in by_agent.get(agent_id, []):
                if v.allocation_id not in seen:
                    seen.add(v.allocation_id)
                    victims.append(v)
        if len(fit) == 1:
            ((agent_id, _),) = fit
            free = self.free(agent_id) + sum(len((v.placement or {})[agent_id]) for v in victims)
            kept: list[Request] = []
            # Spare the victims we least wanted to preempt first (they were walked last).
            for v in reversed(victims):
                n = len((v.placement or {})[agent_id])
                if free - n >= slots:
                    free -= n
                else:
                    kept.append(v)
            victims = kept[::-1]
        return victims

    def reserve(self, fit: Fit, victims: Sequence[Request]) -> None:
        """Holds the fit's slots for a gang that waits for ``victims`` to exit: the free slots it
        will need beyond theirs are taken now so nothing of lower rank lands there."""
        for agent_id, n in fit:
            freed = sum(len((v.placement or {}).get(agent_id, ())) for v in victims)
            self.hold(agent_id, n - freed)


def why_waiting(agents: Sequence[AgentState], placed: Iterable[Request], slots: int) -> str | None:
    """Why a gang of ``slots`` cannot be placed on the pool's agents now, in one line (what it
    needs under the gang rules above, and the free slots there are); ``None`` when it fits now
    (it waits for its turn in the queue, not for room)."""
    if slots <= 0:
        return None
    c = Cluster(agents, placed)
    if c.find(slots) is not None:
        return None
    usable = [a for a in agents if c.usable(a.id)]
    if not usable:
        return "no agent can take work now (none connected, or all disabled or draining)"
    frees = sorted((c.free(a.id) for a in usable if c.free(a.id)), reverse=True)
    free = "+".join(map(str, frees[:4])) + ("+..." if len(frees) > 4 else "")
    have = f"free now: {free}" if frees else "no slot is free now"
    if slots <= c.max_size:
        return f"needs {slots} slot{'' if slots == 1 else 's'} on one agent; {have}"
    sizes = sorted({a.slots for a in usable if a.slots and slots % a.slots == 0}, reverse=True)
    if not sizes:
        return (
            f"needs {slots} slots on whole idle agents of one size that divides {slots};"
            f" no agent here has such a size ({have})"
        )
    size = sizes[0]
    idle = len(c.idle.get(size, {}))
    return (
        f"needs {slots} slots on {slots // size} idle agents of {size} slots;"
        f" {idle} such agent{'' if idle == 1 else 's'} idle, {have}"
    )
