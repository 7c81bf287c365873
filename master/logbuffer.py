"""The master's recent log lines in memory, for ``det master logs`` (lost on restart, by design)."""

from __future__ import annotations

import collections
import datetime as dt
import logging
import threading
from typing import Any

_LINES: collections.deque[dict[str, Any]] = collections.deque(maxlen=5000)
_LOCK = threading.Lock()
_NEXT_ID = [1]  # ids only grow, so a follower asks for what came after the last it saw


class BufferHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        entry = {
            "id": 0,
            "timestamp": dt.datetime.fromtimestamp(record.created, dt.UTC)
            .isoformat()
            .replace("+00:00", "Z"),
            "message": self.format(record),
            "level": "LOG_LEVEL_" + record.levelname.replace("WARNING", "WARNING"),
        }
        with _LOCK:
            entry["id"] = _NEXT_ID[0]
            _NEXT_ID[0] += 1
            _LINES.append(entry)


def recent(after: int = 0) -> list[dict[str, Any]]:
    """The buffered entries (oldest first) whose id is greater than ``after``."""
    with _LOCK:
        return [dict(e) for e in _LINES if e["id"] > after]
