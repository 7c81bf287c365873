"""PostgreSQL access: a connection pool, versioned migrations, typed reads and the embedded
server.

Services take a ``psycopg.Connection`` explicitly; nothing here holds state a restart would lose.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TypeVar

from psycopg.abc import Params
from psycopg.abc import QueryNoTemplate as Query
from psycopg.rows import class_row, dict_row, scalar_row
from psycopg_pool import ConnectionPool

from det.master.db import embedded
from det.master.db.connection import Conn as Conn
from det.master.db.connection import UntypedRow as UntypedRow
from det.master.db.connection import connect as connect

logger = logging.getLogger(__name__)


T = TypeVar("T")

# Held by the process that runs the control loops (see det.master.loop).
LEADER_LOCK_KEY = 0x6465745F6C656164  # "det_lead"
_MIGRATION_LOCK_KEY = 0x6465745F6D696772  # "det_migr"


def open_pool(
    conninfo: str,
    *,
    min_size: int = 2,
    max_size: int = 20,
    configure: Callable[[Conn], None] | None = None,
) -> ConnectionPool[Conn]:
    """``configure`` runs on each new connection (leaving no transaction open)."""
    pool: ConnectionPool[Conn] = ConnectionPool(
        conninfo,
        min_size=min_size,
        max_size=max_size,
        kwargs={"row_factory": dict_row, "autocommit": False},
        configure=configure,
        open=True,
        name="det-master",
    )
    pool.wait(timeout=30)
    return pool


def fetch_row(conn: Conn, kind: type[T], query: Query, params: Params | None = None) -> T | None:
    """The first row as a ``kind`` (a dataclass or TypedDict whose fields are the columns)."""
    return conn.cursor(row_factory=class_row(kind)).execute(query, params).fetchone()


def fetch_rows(conn: Conn, kind: type[T], query: Query, params: Params | None = None) -> list[T]:
    """Every row as a ``kind`` (a dataclass or TypedDict whose fields are the columns)."""
    return conn.cursor(row_factory=class_row(kind)).execute(query, params).fetchall()


def _checked(value: object, kind: type[T], query: Query) -> T:
    if not isinstance(value, kind):
        raise TypeError(f"expected {kind.__name__}, got {type(value).__name__} from {query!r}")
    return value


def scalar(conn: Conn, kind: type[T], query: Query, params: Params | None = None) -> T | None:
    """The first column of the first row, a ``kind``; None when there is no row or it is NULL."""
    value = conn.cursor(row_factory=scalar_row).execute(query, params).fetchone()
    return None if value is None else _checked(value, kind, query)


def one_int(conn: Conn, query: Query, params: Params | None = None) -> int:
    """The int the query must answer (``count(*)``, ``INSERT … RETURNING id``); LookupError when
    there is no row, TypeError when it is not an int."""
    value = scalar(conn, int, query, params)
    if value is None:
        raise LookupError(f"no value from {query!r}")
    return value


def column(conn: Conn, kind: type[T], query: Query, params: Params | None = None) -> list[T]:
    """The first column of every row (ids, names), each a ``kind``; NULLs are a TypeError."""
    values = conn.cursor(row_factory=scalar_row).execute(query, params).fetchall()
    return [_checked(v, kind, query) for v in values]


def exists(conn: Conn, query: Query, params: Params | None = None) -> bool:
    """Whether the query answers any row."""
    return conn.execute(query, params).fetchone() is not None


def _migrations() -> list[tuple[int, str, str]]:
    out = []
    folder = resources.files("det.master.db") / "migrations"
    for entry in folder.iterdir():
        m = re.match(r"(\d+)_(.+)\.sql$", entry.name)
        if m:
            out.append((int(m.group(1)), m.group(2), entry.read_text()))
    out.sort()
    for (v1, n1, _), (v2, n2, _) in itertools.pairwise(out):
        if v1 == v2:  # the version is the key of schema_migrations: the second would never run
            raise RuntimeError(
                f"two migrations are numbered {v1:04d}: {v1:04d}_{n1}.sql and {v2:04d}_{n2}.sql;"
                " give the newer one the next free number"
            )
    return out


def upgrade(conninfo: str) -> list[int]:
    """Applies pending migrations, each in its own transaction; returns the versions applied.

    Safe to run from several processes at once: an advisory lock serialises them.
    """
    applied: list[int] = []
    with connect(conninfo) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK_KEY,))
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version int PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = set(column(conn, int, "SELECT version FROM schema_migrations"))
            for version, name, sql in _migrations():
                if version in done:
                    continue
                with conn.transaction():
                    conn.execute(sql.encode())
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                        (version, name),
                    )
                logger.info("applied migration %04d_%s", version, name)
                applied.append(version)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK_KEY,))
    return applied


def pending(conninfo: str) -> list[str]:
    """The migrations this database lacks (``0014_name``), oldest first; all of them when it
    has no ``schema_migrations`` table. Reads only."""
    with connect(conninfo) as conn:
        done: set[int] = set()
        if scalar(conn, bool, "SELECT to_regclass('schema_migrations') IS NOT NULL"):
            done = set(column(conn, int, "SELECT version FROM schema_migrations"))
    return [f"{v:04d}_{name}" for v, name, _ in _migrations() if v not in done]


def start_embedded(data_dir: Path) -> str:
    """Starts (or reuses) a private PostgreSQL under ``data_dir/postgres``; returns its conninfo.

    Closed to anyone without the password kept in ``data_dir/db_password`` (see
    :mod:`det.master.db.embedded`). Masters on the same data directory share the server
    (pgserver records each process that uses it); it stops when the last of them exits normally
    (``det-master`` turns SIGTERM into a normal exit). A SIGKILLed master leaves it running, and
    the next master reuses it.
    """
    return embedded.start(data_dir)
