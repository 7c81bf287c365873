"""Login throttling: too many failed logins answer 429 for a while.

Two limits over a sliding window (:data:`WINDOW`), counted from failed attempts stored in
PostgreSQL (every API process sees the same counts, and a restart forgets nothing):

- per (username, address): :data:`MAX_FAILURES_PER_USER_AND_ADDRESS`: guessing one user's
  password from one place;
- per address: :data:`MAX_FAILURES_PER_ADDRESS`: trying many usernames from one place.

There is deliberately no limit per username alone: it would let anyone lock a user (the admin
included) out from everywhere by failing on purpose. A successful login clears that pair's
failures. The address is the client's: the connection's peer, or, when the peer is one of
``security.trusted_proxies``, the address those proxies forwarded (:mod:`det.master.clientaddr`;
any client can send ``X-Forwarded-For``, so it counts only from them). Behind a proxy that is
not listed every client shares the proxy's address and the per-address limit applies to all of
them together.
"""

from __future__ import annotations

import datetime as dt
import math

from det.master import db
from det.master.db import Conn

WINDOW = dt.timedelta(minutes=15)
MAX_FAILURES_PER_USER_AND_ADDRESS = 10
MAX_FAILURES_PER_ADDRESS = 100


def retry_after(conn: Conn, username: str, address: str, now: dt.datetime) -> int | None:
    """Seconds until a login from ``address`` as ``username`` may be tried again, or None."""
    since = now - WINDOW
    waits: list[float] = []
    for where, params, limit in (
        ("username = %s AND address = %s", (username, address), MAX_FAILURES_PER_USER_AND_ADDRESS),
        ("address = %s", (address,), MAX_FAILURES_PER_ADDRESS),
    ):
        # The limit-th newest failure inside the window leaves it at (its time + WINDOW).
        failed_at = db.scalar(
            conn,
            dt.datetime,
            f"SELECT failed_at FROM login_failures WHERE {where} AND failed_at > %s"
            " ORDER BY failed_at DESC OFFSET %s LIMIT 1",
            (*params, since, limit - 1),
        )
        if failed_at is not None:
            waits.append((failed_at + WINDOW - now).total_seconds())
    if not waits:
        return None
    return max(1, math.ceil(max(waits)))


def record_failure(conn: Conn, username: str, address: str, now: dt.datetime) -> None:
    conn.execute(
        "INSERT INTO login_failures (username, address, failed_at) VALUES (%s, %s, %s)",
        (username, address, now),
    )
    # Keep the table small: what left the window counts for nothing.
    conn.execute("DELETE FROM login_failures WHERE failed_at < %s", (now - WINDOW,))


def clear(conn: Conn, username: str, address: str) -> None:
    conn.execute(
        "DELETE FROM login_failures WHERE username = %s AND address = %s", (username, address)
    )
