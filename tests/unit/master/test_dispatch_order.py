"""The order the front's workers take parsed requests in (det.master.dispatch): the cluster's
(heartbeats, tasks' calls) ahead of the others, each kind in its arrival order. Served newest
first, the first cluster request of a burst waited for the whole burst (bench/scale.py)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from det.master import dispatch


@dataclass
class _Task:
    name: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    served: list[str] = field(default_factory=list)
    hold: threading.Event | None = None
    started: threading.Event = field(default_factory=threading.Event)

    @property
    def request(self) -> Any:
        return SimpleNamespace(path=self.path, headers=self.headers)

    def service(self) -> None:
        self.started.set()
        if self.hold is not None:
            self.hold.wait(30)
        self.served.append(self.name)

    def cancel(self) -> None:
        pass


def test_cluster_requests_go_ahead_of_users_and_each_kind_in_arrival_order() -> None:
    served: list[str] = []
    d = dispatch.PriorityDispatcher()
    d.set_thread_count(1)
    hold = threading.Event()
    try:
        # The only worker is busy while the others queue up.
        busy = _Task("busy", "/api/v1/experiments", served=served, hold=hold)
        d.add_task(busy)
        assert busy.started.wait(30)
        token = {"GRPC_METADATA_X_ALLOCATION_TOKEN": "Bearer t"}
        for task in [
            _Task("user 1", "/api/v1/experiments", served=served),
            _Task("heartbeat 1", "/api/v1/agents/a-1/heartbeat", served=served),
            _Task("user 2", "/api/v1/models", served=served),
            _Task("report 1", "/api/v1/trials/1/metrics", token, served=served),
            _Task("heartbeat 2", "/api/v1/agents/a-2/heartbeat", served=served),
            _Task("report 2", "/api/v1/trials/2/metrics", token, served=served),
            _Task("last", "/api/v1/agents/a-3/heartbeat", served=served),
        ]:
            d.add_task(task)
        hold.set()
        deadline = threading.Event()
        while len(served) < 8 and not deadline.wait(0.01):
            pass
        assert served == [
            "busy",
            "heartbeat 1",
            "report 1",
            "heartbeat 2",
            "report 2",
            "last",
            "user 1",
            "user 2",
        ]
    finally:
        hold.set()
        d.shutdown(timeout=5)
