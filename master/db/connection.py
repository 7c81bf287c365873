"""The connection type every service takes, and connections opened outside the pool.

A leaf (it imports only psycopg), so :mod:`det.master.db.embedded` opens its connections the
same way as the package that imports it.
"""

from __future__ import annotations

import math
import select
import time
from collections.abc import Iterator
from typing import Any, Protocol

import psycopg
from psycopg.rows import dict_row


class UntypedRow(Protocol):
    """A row read without a row factory, as the type checker sees it: nothing to read from it
    (``row["x"]`` is a type error). The pool's connections still make dicts at run time
    (``dict_row``); a read names its shape with a row factory (``class_row`` of a type in
    ``det.master.rows`` or of its service) or through ``det.master.db``'s ``fetch_row``,
    ``fetch_rows``, ``scalar``, ``one_int``, ``column`` and ``exists``."""


Conn = psycopg.Connection[UntypedRow]


def connect(conninfo: str, *, autocommit: bool = True) -> Conn:
    """A connection of its own, outside the pool (migrations, LISTEN, the leader lock, a probe),
    whose rows are the pool's: opaque to the type checker, so each read names its shape. libpq's
    options (``connect_timeout``, ``keepalives``...) go in ``conninfo`` (``make_conninfo``)."""
    conn: Conn = psycopg.connect(conninfo, autocommit=autocommit, row_factory=dict_row)
    return conn


def notifications(
    conn: psycopg.Connection[Any], timeout: float, stop_after: int | None = None
) -> Iterator[psycopg.Notify]:
    """What ``conn.notifies(timeout=..., stop_after=...)`` yields (the notifications already
    received, then each as it arrives until ``timeout`` seconds have passed or ``stop_after``
    came), waiting in the kernel. psycopg's own timed wait (3.3, its C ``wait_c``) polls in
    whole milliseconds and spins through the last one, about 35 wake-ups: about 1 CPU-ms a call
    however short, which the control loop paid twice a tick and every listener at each of its
    periods: an idle master used 10.5-11.5 CPU-ms a second, 7.5-8.0 with this
    (bench/idle_master.py, three runs each). Here each wait is one ``poll`` rounded up to the
    millisecond; what arrived is read by psycopg with no wait (``timeout=0``). A lost
    connection raises as there."""
    deadline = time.monotonic() + timeout
    poller = select.poll()  # not select(): a master may hold more than 1,024 descriptors
    poller.register(conn.fileno(), select.POLLIN)
    got = 0
    while True:
        for n in conn.notifies(timeout=0):
            yield n
            got += 1
            if stop_after is not None and got >= stop_after:
                return
        left = deadline - time.monotonic()
        if left <= 0:
            return
        poller.poll(math.ceil(left * 1000))
