"""The agent's container runtime as ``det.agent.daemon.Agent`` uses it, without Docker: records
the test sets (``records``) and what the agent asked (``kills``, ``removed``), for tests that run
the real daemon against the fake master (tests/fakes/master.py) with a clock of their own."""

from __future__ import annotations

from typing import Any

from det.agent.reconcile import Actual
from det.common.states import AllocationState


class FakeRuntime:
    """Starts with one running container, allocation ``7.1.1``."""

    def __init__(self) -> None:
        self.records = {"7.1.1": Actual("7.1.1", AllocationState.RUNNING, container_id="c1")}
        self.kills: list[tuple[str, float | None, str | None]] = []
        self.removed: list[str] = []
        self.fence_seconds: float | None = None

    def refresh(self) -> None:
        pass

    def actual(self) -> list[Actual]:
        return list(self.records.values())

    def adopt(self, cluster_id: str) -> bool:
        return False

    def start(self, alloc: str, spec: Any) -> None:
        self.records[alloc] = Actual(alloc, AllocationState.STARTING)

    def kill(self, alloc: str, *, grace: float | None = None, error: str | None = None) -> None:
        self.kills.append((alloc, grace, error))
        a = self.records[alloc]
        self.records[alloc] = Actual(alloc, a.state, a.container_id, killing=True, error=error)

    def remove(self, alloc: str) -> None:
        self.removed.append(alloc)
        self.records.pop(alloc, None)
