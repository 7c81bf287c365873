"""Invariants every decision keeps, over seeded random pools and every policy."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest

from det.master.scheduler import (
    AgentState,
    Decision,
    Policy,
    PoolSnapshot,
    Request,
    can_ever_fit,
    schedule,
)

POLICIES = [
    Policy("priority"),
    Policy("priority", preemption=True),
    Policy("priority", fitting="worst"),
    Policy("fair_share"),
    Policy("round_robin"),
]


def _random_pool(rng: random.Random, policy: Policy) -> PoolSnapshot:
    agents = []
    for i in range(rng.randint(1, 12)):
        roll = rng.random()
        agents.append(
            AgentState.with_slots(
                f"ag{i}",
                rng.choice((0, 1, 2, 4, 4, 8)),
                enabled=roll > 0.1,
                draining=0.1 <= roll < 0.2,
            )
        )
    requests: list[Request] = []
    jobs = [
        (f"job{j}", rng.choice((1, 10, 42, 60, 99)), rng.choice((0.5, 1.0, 3.0))) for j in range(6)
    ]
    n = 0
    for a in agents:
        free = list(a.slot_ids)
        while free and rng.random() < 0.7:
            k = min(len(free), rng.choice((1, 1, 2, 4)))
            job, prio, weight = rng.choice(jobs)
            requests.append(
                Request(
                    f"r{n}",
                    job,
                    k,
                    prio,
                    weight,
                    rng.random(),
                    preemptible=rng.random() > 0.2,
                    placement={a.id: tuple(free[:k])},
                    preempting=rng.random() < 0.1,
                )
            )
            del free[:k]
            n += 1
        for _ in range(rng.randint(0, 2)):
            job, prio, weight = rng.choice(jobs)
            requests.append(
                Request(f"r{n}", job, 0, prio, weight, rng.random(), placement={a.id: ()})
            )
            n += 1
    for _ in range(rng.randint(0, 30)):
        job, prio, weight = rng.choice(jobs)
        slots = rng.choice((0, 1, 1, 2, 3, 4, 8, 16))
        requests.append(Request(f"r{n}", job, slots, prio, weight, rng.random()))
        n += 1
    rng.shuffle(requests)
    return PoolSnapshot(tuple(agents), tuple(requests), policy, rng.choice((1, 2, 100)))


def _check(snapshot: PoolSnapshot, decision: Decision) -> None:
    agents = {a.id: a for a in snapshot.agents}
    requests = {r.allocation_id: r for r in snapshot.requests}
    used: set[tuple[str, str]] = set()
    for r in snapshot.requests:
        for agent_id, slot_ids in (r.placement or {}).items():
            used.update((agent_id, s) for s in slot_ids)
    aux = Counter(a for r in snapshot.requests if r.slots == 0 for a in (r.placement or {}))
    for allocation_id, placement in decision.placements.items():
        r = requests[allocation_id]
        assert r.placement is None, "a placed request was moved"
        assert all(agents[a].schedulable for a in placement), "placed on a closed agent"
        assert sum(len(s) for s in placement.values()) == r.slots, "gang not whole"
        if r.slots == 0:
            (agent_id,) = placement
            aux[agent_id] += 1
            assert aux[agent_id] <= snapshot.max_aux_containers_per_agent
            continue
        if len(placement) > 1:
            sizes = {agents[a].slots for a in placement}
            assert len(sizes) == 1, "multi-agent gang on agents of different sizes"
            assert all(len(s) == agents[a].slots for a, s in placement.items()), "partial agent"
        for agent_id, slot_ids in placement.items():
            for s in slot_ids:
                assert s in agents[agent_id].slot_ids
                assert (agent_id, s) not in used, "slot double-booked"
                used.add((agent_id, s))
    for allocation_id in decision.preemptions:
        r = requests[allocation_id]
        assert r.placement is not None and r.preemptible and not r.preempting
    assert len(set(decision.preemptions)) == len(decision.preemptions)
    assert sorted(e.allocation_id for e in decision.queue) == sorted(requests)
    assert {j.job_id for j in decision.jobs} == {r.job_id for r in snapshot.requests}
    assert [j.jobs_ahead for j in decision.jobs] == list(range(len(decision.jobs)))


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"{p.kind}-{p.preemption}-{p.fitting}")
def test_decisions_never_break_the_placement_rules(policy: Policy) -> None:
    rng = random.Random(7)
    for _ in range(150):
        snapshot = _random_pool(rng, policy)
        decision = schedule(snapshot)
        _check(snapshot, decision)
        assert schedule(snapshot) == decision, "the same snapshot must give the same decision"


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"{p.kind}-{p.preemption}-{p.fitting}")
def test_an_empty_pool_places_whatever_could_ever_fit_it_alone(policy: Policy) -> None:
    rng = random.Random(11)
    for _ in range(100):
        agents = tuple(
            AgentState.with_slots(f"a{i}", rng.choice((1, 2, 4, 8)))
            for i in range(rng.randint(1, 6))
        )
        slots = rng.randint(1, 24)
        decision = schedule(PoolSnapshot(agents, (Request("t", "j", slots),), policy))
        fits = can_ever_fit(slots, agents) is None
        assert ("t" in decision.placements) is fits, (slots, [a.slots for a in agents])


def _apply(snapshot: PoolSnapshot, decision: Decision, generation: int) -> PoolSnapshot:
    """What the master does between passes: place, ask victims to stop; stopped work exits and
    comes back as a new pending request of the same job (resuming from its checkpoint)."""
    out = []
    for r in snapshot.requests:
        if r.preempting:
            out.append(
                dataclasses.replace(
                    r,
                    allocation_id=f"{r.allocation_id}.{generation}",
                    placement=None,
                    preempting=False,
                )
            )
        elif r.allocation_id in decision.placements:
            out.append(dataclasses.replace(r, placement=decision.placements[r.allocation_id]))
        elif r.allocation_id in decision.preemptions:
            out.append(dataclasses.replace(r, preempting=True))
        else:
            out.append(r)
    return dataclasses.replace(snapshot, requests=tuple(out))


@pytest.mark.parametrize(
    "policy", [Policy("priority", preemption=True), Policy("fair_share")], ids=str
)
def test_repeated_passes_settle_without_preemption_churn(policy: Policy) -> None:
    rng = random.Random(3)
    for _ in range(40):
        snapshot = _random_pool(rng, policy)
        snapshot = dataclasses.replace(
            snapshot,
            requests=tuple(dataclasses.replace(r, preempting=False) for r in snapshot.requests),
        )
        history = []
        for generation in range(12):
            decision = schedule(snapshot)
            assert not set(decision.waiting) & set(decision.placements)
            history.append(len(decision.preemptions))
            snapshot = _apply(snapshot, decision, generation)
        assert history[-4:] == [0, 0, 0, 0], history
