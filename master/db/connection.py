"""The connection type every service takes, and connections opened outside the pool.

A leaf (it imports only psycopg), so :mod:`det.master.db.embedded` opens its connections the
same way as the package that imports it.
"""

from __future__ import annotations

from typing import Protocol

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
