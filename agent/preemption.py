"""Polls the cloud's spot/preemption notice so heartbeats can carry `preemptionNotice`.

The cloud modules (`det.agent.notice_aws.AwsSpotNotice`, `det.agent.notice_gcp.
GcpPreemptionNotice`) are imported by name, lazily: an agent that does not use them never loads
them. Their `check()` returns None or `{"source": ..., "deadline": iso}`. Once seen, a notice
sticks: the machine is going away whatever the metadata service says next.
"""

from __future__ import annotations

import importlib
import logging
import threading
from typing import Any, Protocol

logger = logging.getLogger(__name__)

NOTICE_CLASSES = {
    "aws": ("det.agent.notice_aws", "AwsSpotNotice"),
    "gcp": ("det.agent.notice_gcp", "GcpPreemptionNotice"),
}


class NoticeSource(Protocol):
    def check(self) -> dict[str, Any] | None: ...


def load_notice_source(kind: str, base_url: str) -> NoticeSource:
    module_name, class_name = NOTICE_CLASSES[kind]
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as e:
        raise RuntimeError(
            f"preemption_notice {kind}: cannot load {module_name}.{class_name}: {e}"
        ) from e
    source: NoticeSource = cls(base_url)
    return source


class NoticePoller:
    """Calls `source.check()` every `interval` seconds on a daemon thread."""

    def __init__(self, source: NoticeSource, interval: float) -> None:
        self._source = source
        self._interval = interval
        self._notice: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="preemption-notice", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def current(self) -> dict[str, Any] | None:
        with self._lock:
            return self._notice

    def poll_once(self) -> None:
        if self.current() is not None:
            return
        try:
            notice = self._source.check()
        except Exception as e:  # a flaky metadata service must not stop the agent
            logger.debug("preemption notice check failed: %s", e)
            return
        if notice:
            logger.warning("preemption notice: %s", notice)
            with self._lock:
                self._notice = dict(notice)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self._interval)
