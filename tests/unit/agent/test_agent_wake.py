"""The agent meeting a sleeping serverless master: its call waits for the master to wake and the
agent logs "waking the master" once per wait, not one outage per heartbeat."""

from __future__ import annotations

import logging

import pytest

from det.agent.master_client import MasterClient
from tests.fakes.sleeping_front import OK, PLATFORM_503, sleeping_front


def test_a_heartbeat_waits_for_a_waking_master_and_the_agent_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="det.agent.master_client")
    with sleeping_front([PLATFORM_503, PLATFORM_503, OK, PLATFORM_503, OK]) as front:
        client = MasterClient(front.url, "tok", wake_seconds=30)
        client.heartbeat("a1", {"containers": []})  # type: ignore[typeddict-item]
        client.heartbeat("a1", {"containers": []})  # type: ignore[typeddict-item]
    waking = [r for r in caplog.records if "waking the master" in r.getMessage()]
    assert len(waking) == 2 and all(r.levelno == logging.INFO for r in waking)
    assert [m for m, _ in front.seen] == ["POST"] * 5
