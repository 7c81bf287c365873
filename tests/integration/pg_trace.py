"""What the master's pooled connections send and get, from libpq's own trace: for tests that
count a request's round trips (one ``ReadyForQuery`` ends each) or look for a statement."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from psycopg import pq


@contextmanager
def traced_pool(pool: Any, trace: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every connection ``pool`` hands out while the block runs writes its protocol messages
    to ``trace`` (without timestamps); the trace stops when the block ends."""
    getconn = pool.getconn
    traced: list[Any] = []
    with trace.open("w") as out:

        def traced_getconn(*a: Any, **kw: Any) -> Any:
            conn = getconn(*a, **kw)
            conn.pgconn.trace(out.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
            traced.append(conn)
            return conn

        monkeypatch.setattr(pool, "getconn", traced_getconn)
        try:
            yield
        finally:
            monkeypatch.setattr(pool, "getconn", getconn)
            for conn in traced:
                conn.pgconn.untrace()


def round_trips(trace: Path) -> int:
    return trace.read_text().count("\tReadyForQuery\t")
