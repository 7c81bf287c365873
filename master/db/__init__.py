"""PostgreSQL access: a connection pool, versioned migrations and the embedded server.

Services take a ``psycopg.Connection`` explicitly; nothing here holds state a restart would lose.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from det.master.db import embedded

logger = logging.getLogger(__name__)

Conn = psycopg.Connection[dict[str, Any]]

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
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK_KEY,))
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version int PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
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
    with psycopg.connect(conninfo, autocommit=True) as conn:
        exists = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
        done: set[int] = set()
        if exists and exists[0]:
            done = {int(r[0]) for r in conn.execute("SELECT version FROM schema_migrations")}
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
