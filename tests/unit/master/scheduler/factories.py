"""Builders for scheduler snapshots: agents, pending and running requests."""

from __future__ import annotations

import itertools

from det.master.scheduler import AgentState, Decision, Policy, PoolSnapshot, Request, schedule

_order = itertools.count()


def agent(id: str, slots: int, *, enabled: bool = True, draining: bool = False) -> AgentState:
    return AgentState.with_slots(id, slots, enabled=enabled, draining=draining)


def pending(
    id: str,
    slots: int = 1,
    *,
    job: str | None = None,
    priority: int = 42,
    weight: float = 1.0,
    order: float | None = None,
    preemptible: bool = True,
) -> Request:
    """A queued request; ``order`` defaults to creation order (later calls run later)."""
    return Request(
        id,
        job or f"job-{id}",
        slots,
        priority,
        weight,
        next(_order) if order is None else order,
        preemptible,
    )


def running(
    id: str,
    where: dict[str, tuple[str, ...]],
    *,
    job: str | None = None,
    priority: int = 42,
    weight: float = 1.0,
    order: float | None = None,
    preemptible: bool = True,
    preempting: bool = False,
    started: float = 0.0,
) -> Request:
    """A placed request on ``{agent: slot ids}`` (``()`` for a zero-slot task)."""
    return Request(
        id,
        job or f"job-{id}",
        sum(len(s) for s in where.values()),
        priority,
        weight,
        next(_order) if order is None else order,
        preemptible,
        placement=where,
        preempting=preempting,
        started=started,
    )


def ids(*slots: int) -> tuple[str, ...]:
    return tuple(str(s) for s in slots)


def run(
    agents: list[AgentState],
    requests: list[Request],
    kind: str = "priority",
    *,
    preemption: bool = False,
    fitting: str = "best",
    max_aux: int = 100,
) -> Decision:
    return schedule(
        PoolSnapshot(tuple(agents), tuple(requests), Policy(kind, preemption, fitting), max_aux)
    )
