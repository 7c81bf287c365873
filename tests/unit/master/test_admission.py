"""Admission limits for user requests (det.master.api._admission)."""

from __future__ import annotations

import pytest

from det.master.api._admission import Admission, Limits
from det.master.errors import TooManyRequests


def test_limits_leave_an_eighth_of_the_threads_to_agents_and_tasks() -> None:
    lim = Limits.for_threads(128)
    assert (lim.per_user, lim.users_total, lim.waits_per_user, lim.waits_total) == (8, 112, 8, 64)
    assert Limits.for_threads(1) == Limits(1, 1, 1, 1)


def test_one_user_is_held_to_its_share_and_others_still_get_in() -> None:
    adm = Admission(Limits(per_user=2, users_total=3, waits_per_user=1, waits_total=2))
    a = [adm.admit(1, waiting=False), adm.admit(1, waiting=False)]
    with pytest.raises(TooManyRequests, match="more than 2 requests of this user"):
        adm.admit(1, waiting=False)
    b = adm.admit(2, waiting=False)
    with pytest.raises(TooManyRequests, match="as many user requests as it allows"):
        adm.admit(3, waiting=False)
    adm.release(a[0])
    adm.release(b)
    assert adm.in_flight() == (1, 0)
    adm.admit(3, waiting=False)


def test_waiting_requests_have_their_own_caps_and_are_released() -> None:
    adm = Admission(Limits(per_user=10, users_total=10, waits_per_user=1, waits_total=2))
    w1 = adm.admit(1, waiting=True)
    with pytest.raises(TooManyRequests, match="waiting requests of this user"):
        adm.admit(1, waiting=True)
    adm.admit(1, waiting=False)  # a quick request of the same user still gets in
    adm.admit(2, waiting=True)
    with pytest.raises(TooManyRequests, match="as many waiting requests"):
        adm.admit(3, waiting=True)
    adm.release(w1)
    adm.admit(3, waiting=True)
    assert adm.in_flight() == (3, 2)


def test_a_refusal_says_when_to_retry() -> None:
    adm = Admission(Limits(1, 1, 1, 1))
    adm.admit(1, waiting=False)
    with pytest.raises(TooManyRequests) as e:
        adm.admit(1, waiting=False)
    assert e.value.retry_after == 1 and e.value.status == 429
