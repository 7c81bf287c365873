"""The master's recent log lines in memory, for ``det master logs`` (lost on restart, by design)."""

from __future__ import annotations

import collections
import datetime as dt
import logging
import threading
from typing import Any

_LINES: collections.deque[dict[str, Any]] = collections.deque(maxlen=5000)
_LOCK = threading.Lock()


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
            _LINES.append(entry)


def recent() -> list[dict[str, Any]]:
    with _LOCK:
        out = list(_LINES)
    for i, e in enumerate(out):
        e["id"] = i
    return out
