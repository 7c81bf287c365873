"""Long-polls the server cuts at its cap end at their key's phase of a cycle of one cap
(det.master.preemptwait.spread_wait): pollers that asked together are answered spread over the
whole cycle, and each still asks once a cap."""

from __future__ import annotations

import collections
import random

from det.master.preemptwait import spread_wait

CAP = 30.0
NOW = 1_796_000_000.25


def test_a_wait_asked_below_the_cap_is_kept_as_asked() -> None:
    for asked in (0.0, 1.0, 25.0, 29.99):
        assert spread_wait("alloc-1", asked, CAP, NOW) == asked


def test_a_wait_past_the_cap_ends_at_the_keys_phase_between_half_a_cap_and_one_and_a_half() -> None:
    rng = random.Random(7)
    for i in range(2_000):
        key = f"alloc-{i}"
        now = NOW + rng.uniform(0, 1_000)
        waited = spread_wait(key, 60.0, CAP, now)
        assert CAP / 2 <= waited < CAP * 1.5, (key, now, waited)
        # Asked again at any later time, the key ends at the same instant of the cycle.
        later = now + rng.uniform(0, 500)
        drift = ((now + waited) - (later + spread_wait(key, 60.0, CAP, later))) % CAP
        assert min(drift, CAP - drift) < 1e-5, (key, drift)


def test_a_wait_never_ends_past_what_was_asked() -> None:
    ends = [spread_wait(f"alloc-{i}", 33.0, CAP, NOW) for i in range(500)]
    assert max(ends) == 33.0 and min(ends) >= CAP / 2


def test_pollers_that_asked_together_are_answered_over_the_whole_cycle_once_a_cap() -> None:
    # 1,400 trials that all asked within one second (their start, or a master's restart); each
    # asks again 5 ms after its answer.
    rng = random.Random(3)
    asked_at = {f"alloc-{i}": NOW + rng.uniform(0, 1) for i in range(1_400)}
    for cycle in range(4):
        waits = {k: spread_wait(k, 60.0, CAP, t) for k, t in asked_at.items()}
        answered = {k: asked_at[k] + w for k, w in waits.items()}
        per_second = collections.Counter(int(t) for t in answered.values())
        # Evenly over the 30 s cycle is about 47 a second; together, 1,400 in one.
        assert max(per_second.values()) < 80, (cycle, per_second.most_common(3))
        assert max(answered.values()) - min(answered.values()) > CAP - 1
        if cycle:  # from the second poll on, each waits a cap (less the 5 ms): no more polls
            assert min(waits.values()) > CAP - 0.01, min(waits.values())
        asked_at = {k: t + 0.005 for k, t in answered.items()}


def test_keys_differ_in_phase() -> None:
    ends = {round(spread_wait(f"a{i}", 60.0, CAP, NOW), 3) for i in range(50)}
    assert len(ends) > 40


def test_at_the_masters_cap_the_harness_poll_waits_the_minute_it_asks() -> None:
    """The harness (as Determined's client) asks 60 s and asks again at each answer: at the
    master's cap, once a poll has come to its allocation's phase, each waits the whole minute it
    asked, so a trial costs the master one poll a minute (a 30 s cap answered each twice)."""
    import inspect

    from det.core._preempt import PreemptContext
    from det.master.api.tasks import MAX_LONG_POLL_SECONDS

    asked = inspect.signature(PreemptContext.__init__).parameters["poll_seconds"].default
    rng = random.Random(11)
    for i in range(500):
        key = f"alloc-{i}"
        at = NOW + rng.uniform(0, 600)
        first = spread_wait(key, float(asked), MAX_LONG_POLL_SECONDS, at)
        assert first <= asked
        at += first
        for _ in range(3):
            waited = spread_wait(key, float(asked), MAX_LONG_POLL_SECONDS, at)
            assert abs(waited - asked) < 1e-6, (key, waited)
            at += waited
