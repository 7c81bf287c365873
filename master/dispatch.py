"""Agents and tasks first: the order in which waitress's threads take parsed requests.

waitress parses requests in its event loop and queues them for its worker threads in arrival
order. Under a flood of user requests a heartbeat would wait behind all of them; the admission
limits (:mod:`det.master.api._admission`) keep user requests from holding every thread, and
this dispatcher puts the requests that keep the cluster alive at the front of the queue, so the
next free thread takes them: agent heartbeats, anything carrying an allocation token (task
reports, logs, preemption signals) and ``/info`` / ``/health`` (load balancers' and clients'
health checks). Among themselves they are served newest first, which is harmless for
idempotent heartbeats and reports.
"""

from __future__ import annotations

from typing import Any

from waitress.task import ThreadedTaskDispatcher

_FIRST_PATHS = ("/info", "/health")


def goes_first(path: str, headers: dict[str, str]) -> bool:
    """``headers`` as waitress keeps them (upper case, ``-`` as ``_``)."""
    return (
        path in _FIRST_PATHS
        or path.endswith("/heartbeat")
        or "GRPC_METADATA_X_ALLOCATION_TOKEN" in headers
    )


class PriorityDispatcher(ThreadedTaskDispatcher):  # type: ignore[misc]
    def add_task(self, task: Any) -> None:
        request = getattr(task, "request", None)
        path = getattr(request, "path", "") or ""
        headers = getattr(request, "headers", None) or {}
        if not goes_first(path, headers):
            super().add_task(task)
            return
        with self.lock:
            self.queue.appendleft(task)
            self.queue_cv.notify()


def dispatcher(threads: int) -> PriorityDispatcher:
    d = PriorityDispatcher()
    d.set_thread_count(threads)
    return d
