"""With no request waiting the decision is empty, whatever runs, on every policy: the premise of
``services.scheduling.schedule_all`` reading no snapshot for a pool where nothing is PENDING."""

from __future__ import annotations

import dataclasses
import random

import pytest

from det.master.scheduler import schedule
from tests.unit.master.scheduler.test_scheduler_invariants import POLICIES, _random_pool


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"{p.kind}-{p.preemption}-{p.fitting}")
def test_a_pool_where_nothing_waits_gets_no_placement_and_no_preemption(policy: object) -> None:
    rng = random.Random(43)
    checked = 0
    for _ in range(300):
        pool = _random_pool(rng, policy)  # type: ignore[arg-type]
        placed = tuple(r for r in pool.requests if r.placement is not None)
        decision = schedule(dataclasses.replace(pool, requests=placed))
        assert not decision.placements and not decision.preemptions, (pool, decision)
        checked += bool(placed)
    assert checked > 100  # most pools ran something
