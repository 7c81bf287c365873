"""Preemption: the master asks a trial to checkpoint and exit (pause, kill, searcher stop,
scheduler preemption, spot interruption).

A background thread long-polls ``GET /api/v1/allocations/{id}/signals/preemption?timeout_seconds=N``
(answer ``{"preempt": bool}``) until it sees ``true``. ``should_preempt()`` never waits on the
network after the first answer. In ``WorkersAskChief`` mode (default) only the chief polls and
every worker gets the chief's answer by broadcast, so all ranks stop at the same step. The first
``True`` is acknowledged with ``POST /api/v1/allocations/{id}/signals/ack_preemption`` so the
master knows the exit is a preemption, not completion.
"""

from __future__ import annotations

import enum
import logging
import threading

from ..common.api import Session
from ._distributed import DistributedContext

logger = logging.getLogger(__name__)


class PreemptMode(enum.Enum):
    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"
    WorkersAskMaster = "WORKERS_ASK_MASTER"


class _PreemptionWatcher(threading.Thread):
    def __init__(
        self, session: Session, allocation_id: str, poll_seconds: int, error_backoff: float
    ) -> None:
        super().__init__(daemon=True, name="det-preemption-watcher")
        self._session = session
        self._allocation_id = allocation_id
        self._poll_seconds = poll_seconds
        self._error_backoff = error_backoff
        self._result: bool | None = None
        self._first = threading.Event()
        self._quit = threading.Event()

    def _poll(self, timeout_seconds: int) -> bool:
        r = self._session.get(
            f"/api/v1/allocations/{self._allocation_id}/signals/preemption",
            params={"timeout_seconds": str(timeout_seconds)},
            timeout=timeout_seconds + 10,
            retry=False,
        )
        return r.json().get("preempt") is True

    def run(self) -> None:
        try:
            self._result = self._poll(0)
        except Exception as e:
            logger.warning("initial preemption check failed (continuing): %s", e)
            self._result = False
        finally:
            self._first.set()
        while not self._result and not self._quit.is_set():
            try:
                self._result = self._poll(self._poll_seconds)
            except Exception as e:
                logger.debug("preemption long-poll failed (retrying): %s", e)
                self._quit.wait(self._error_backoff)
        if self._result:
            logger.info("preemption signal received")

    def should_preempt(self) -> bool:
        self._first.wait()
        return bool(self._result)

    def close(self) -> None:
        self._quit.set()


class PreemptContext:
    def __init__(
        self,
        session: Session,
        allocation_id: str,
        dist: DistributedContext,
        preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
        *,
        poll_seconds: int = 60,
        error_backoff: float = 1.0,
    ) -> None:
        self._session = session
        self._allocation_id = allocation_id
        self._dist = dist
        self._mode = PreemptMode(preempt_mode)
        self._watcher: _PreemptionWatcher | None = None
        if dist.rank == 0 or self._mode == PreemptMode.WorkersAskMaster:
            self._watcher = _PreemptionWatcher(session, allocation_id, poll_seconds, error_backoff)
        self._started = False
        self._acked = False

    def _start(self) -> None:
        if self._started:
            raise RuntimeError("the preemption context was already started")
        self._started = True
        if self._watcher is not None:
            self._watcher.start()

    def _close(self) -> None:
        if self._watcher is not None:
            self._watcher.close()

    def should_preempt(self, auto_ack: bool = True) -> bool:
        """True when this task should checkpoint and exit. In WorkersAskChief mode every worker
        must call this in step (it is a broadcast)."""
        if not self._started:
            raise RuntimeError("should_preempt() called outside of the core context")
        if self._watcher is not None:
            out = self._watcher.should_preempt()
            if out and auto_ack and not self._acked:
                self.acknowledge_preemption_signal()
            if self._mode == PreemptMode.WorkersAskChief:
                self._dist.broadcast(out)
            return out
        if self._mode == PreemptMode.ChiefOnly:
            raise RuntimeError("preempt_mode=ChiefOnly: only the chief may call should_preempt()")
        return bool(self._dist.broadcast(None))

    def acknowledge_preemption_signal(self) -> None:
        self._acked = True
        self._session.post(f"/api/v1/allocations/{self._allocation_id}/signals/ack_preemption")


class DummyPreemptContext(PreemptContext):
    """Off-cluster: never preempted (still in step with the workers in WorkersAskChief)."""

    def __init__(
        self, dist: DistributedContext, preempt_mode: PreemptMode = PreemptMode.WorkersAskChief
    ) -> None:
        self._dist = dist
        self._mode = PreemptMode(preempt_mode)
        self._watcher = None
        self._started = False
        self._acked = False

    def should_preempt(self, auto_ack: bool = True) -> bool:
        if not self._started:
            raise RuntimeError("should_preempt() called outside of the core context")
        if self._mode == PreemptMode.WorkersAskChief:
            return bool(self._dist.broadcast(False if self._dist.rank == 0 else None))
        return False

    def acknowledge_preemption_signal(self) -> None:
        logger.info("preemption acknowledged (off-cluster: nothing to do)")
