"""Metric series kept per API process while their trial is unchanged: sampled series
(CompareTrials) and a trial's whole series (``GET /api/v1/trials/{id}/metrics``).

Charts poll: the WebUI asks for the same trials' sampled series every few seconds, and a
finished trial's series never changes. Sampling one trial's long series costs PostgreSQL about
500 index probes and the points' JSON (a few ms of CPU each); checking whether the trial changed
costs nothing extra, because the request reads the trial's row anyway.

**Validity.** The ingest writes a trial's metric rows in the statement that updates its
``trials`` row (``services.trials.report_metrics``), and nothing else writes ``metrics``; so a
trial's series can only have changed if its row did, and every update of a row gives it a new
``xmin`` (the writing transaction's id). An entry is stored under the ``xmin`` read *before* the
series was read (the answer is at least as new as that row) and served only while the row
still has it. Other updates of the row (state, progress) merely cost a miss. Entries also expire
after ``max_age`` seconds, which keeps a transaction id from ever being seen twice.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

# An answer: JSON text (or a rendered body) of a trial's points, or None when it has none.
V = TypeVar("V", str, bytes)


class SeriesCache(Generic[V]):
    """A least-recently-used map of (request key, trial) -> points, bounded in bytes."""

    def __init__(self, max_bytes: int = 32 << 20, max_age: float = 300.0) -> None:
        self.max_bytes = max_bytes
        self.max_age = max_age
        self._items: OrderedDict[Hashable, tuple[int, float, V | None]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable, version: int) -> tuple[bool, V | None]:
        """(True, points) when ``key`` is held under ``version`` and fresh; else (False, None)."""
        with self._lock:
            entry = self._items.get(key)
            if entry is None:
                return False, None
            held, at, points = entry
            if held != version or time.monotonic() - at > self.max_age:
                self._drop(key)
                return False, None
            self._items.move_to_end(key)
            return True, points

    def put(self, key: Hashable, version: int, points: V | None) -> None:
        size = len(points) if points is not None else 0
        if size > self.max_bytes // 4:
            return
        with self._lock:
            self._drop(key)
            self._items[key] = (version, time.monotonic(), points)
            self._bytes += size
            while self._bytes > self.max_bytes and self._items:
                self._drop(next(iter(self._items)))

    def _drop(self, key: Hashable) -> None:
        entry = self._items.pop(key, None)
        if entry is not None:
            self._bytes -= len(entry[2]) if entry[2] is not None else 0


SAMPLED: SeriesCache[str] = SeriesCache()
# Whole series, as the answer's body: 10,000 steps of 10 metrics are about 4 MB; an entry may
# take up to a quarter of the budget (larger series are read each time, as before). The same
# budget as the sampled series and the list's pages: the master's memory stays as documented.
WHOLE: SeriesCache[bytes] = SeriesCache()
