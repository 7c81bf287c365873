"""The shared client's wait for a sleeping serverless master (det.common.api.wake_retry):
which answers it waits through, for which methods, how long, and that it says so once."""

from __future__ import annotations

import pytest

from det.common import api
from det.common.api import MasterStatusError, MasterUnreachable, Session
from tests.fakes.sleeping_front import (
    MASTER_503,
    OK,
    PLATFORM_502,
    PLATFORM_503,
    sleeping_front,
)
from tests.ports import free_port


class _Told:
    def __init__(self) -> None:
        self.messages: list[str] = []
        self.slept: list[float] = []

    def session(self, url: str, **kwargs: object) -> Session:
        return Session(
            url, retry_seconds=0, sleep=self.slept.append, on_wake=self.messages.append,
            **kwargs,  # type: ignore[arg-type]
        )  # fmt: skip


def test_a_post_waits_while_the_platform_answers_for_a_sleeping_master_and_says_so_once():
    told = _Told()
    with sleeping_front([PLATFORM_503, PLATFORM_503, PLATFORM_503, OK]) as front:
        r = told.session(front.url).post("/api/v1/experiments", json={})
    assert r.status_code == 200
    assert [m for m, _ in front.seen] == ["POST"] * 4  # the ALB's 503: no master got it
    assert told.slept == [1.0, 2.0, 4.0]
    (message,) = told.messages
    assert message.startswith(f"waking the master at {front.url}") and "300 s" in message


def test_the_masters_own_503_to_a_post_is_never_sent_again():
    told = _Told()
    with sleeping_front([MASTER_503, OK]) as front, pytest.raises(MasterStatusError) as e:
        told.session(front.url).post("/api/v1/experiments", json={})
    assert e.value.status == 503 and "resuming" in e.value.message
    assert len(front.seen) == 1 and not told.messages and not told.slept


def test_once_waking_a_get_waits_through_502s_and_the_masters_503_but_a_post_does_not():
    answers = [PLATFORM_503, PLATFORM_502, MASTER_503, OK]
    told = _Told()
    with sleeping_front(answers) as front:
        assert told.session(front.url).get("/api/v1/master").status_code == 200
    assert len(front.seen) == 4 and len(told.messages) == 1
    told = _Told()
    with sleeping_front(answers) as front, pytest.raises(MasterStatusError) as e:
        told.session(front.url).post("/api/v1/experiments", json={})
    assert e.value.status == 502  # it may have reached a starting master: not sent again
    assert len(front.seen) == 2


def test_a_refused_connection_alone_is_said_at_once():
    told = _Told()
    with pytest.raises(MasterUnreachable):
        told.session(f"http://127.0.0.1:{free_port()}").get("/info")
    assert not told.messages and not told.slept


def test_the_wait_is_bounded_by_wake_seconds():
    told = _Told()
    with sleeping_front([PLATFORM_503]) as front, pytest.raises(MasterStatusError) as e:
        told.session(front.url, wake_seconds=40).get("/info")
    assert e.value.status == 503
    assert told.slept == api.wake_delays(40) == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert len(front.seen) == len(told.slept) + 1 and len(told.messages) == 1


def test_a_later_sleep_is_said_again_after_the_master_answered():
    told = _Told()
    with sleeping_front([PLATFORM_503, OK, PLATFORM_503, OK]) as front:
        s = told.session(front.url)
        s.get("/info")
        s.get("/info")
    assert len(told.messages) == 2


def test_wake_seconds_come_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(api.WAKE_SECONDS_ENV, "0")
    told = _Told()
    with sleeping_front([PLATFORM_503, OK]) as front, pytest.raises(MasterStatusError):
        told.session(front.url).get("/info")
    assert not told.slept
    monkeypatch.setenv(api.WAKE_SECONDS_ENV, "soon")
    with pytest.raises(ValueError, match="DET_MASTER_WAKE_SECONDS must be a number"):
        api.wake_seconds_from_env()


def test_the_client_waits_longer_than_the_modelled_worst_wake():
    # tests/unit/deploy/test_deploy_wake_model.py: an AWS wake answered within 185 simulated s;
    # its worst case adds a period's alignment (60 s): still within the default wait.
    assert sum(api.wake_delays(api.DEFAULT_WAKE_SECONDS)) >= 185 + 60
    assert max(api.wake_delays(api.DEFAULT_WAKE_SECONDS)) < 60  # a 503 in every minute
