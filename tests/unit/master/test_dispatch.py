"""Agents, tasks and health checks go first in the queue of parsed requests (det.master.dispatch)."""

from __future__ import annotations

from dataclasses import dataclass, field

from det.master.dispatch import PriorityDispatcher, goes_first


@dataclass
class _Request:
    path: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class _Task:
    request: _Request


def test_what_goes_first() -> None:
    assert goes_first("/info", {})
    assert goes_first("/api/v1/agents/a-1/heartbeat", {"AUTHORIZATION": "Bearer x"})
    assert goes_first("/api/v1/trials/3/metrics", {"GRPC_METADATA_X_ALLOCATION_TOKEN": "Bearer t"})
    assert not goes_first("/api/v1/experiments", {"AUTHORIZATION": "Bearer user"})
    assert not goes_first("/api/v1/allocations/a/signals/preemption", {})


def test_a_heartbeat_queued_behind_user_requests_is_taken_first() -> None:
    d = PriorityDispatcher()  # no threads: the queue's order is what is checked
    users = [_Task(_Request("/api/v1/experiments")) for _ in range(3)]
    for t in users:
        d.add_task(t)
    beat = _Task(_Request("/api/v1/agents/a/heartbeat"))
    d.add_task(beat)
    d.add_task(_Task(_Request("/api/v1/experiments")))
    assert d.queue[0] is beat
    assert list(d.queue)[1:4] == users
