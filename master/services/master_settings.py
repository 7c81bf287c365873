"""Master settings changed at run time (Determined's PatchMasterConfig: ``log.level`` and
``log.color``), stored in PostgreSQL so every master process on the database applies them.

Each process runs :func:`watch_forever`: a cheap poll of the settings' highest version, and the
new log level applied to the process's root logger when it moved. A setting once made holds
across restarts until it is set again (master.yaml's ``log.level`` is the level until then).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from det.common.jsontypes import JSONObject, JSONValue
from det.master import db
from det.master.db import Conn

logger = logging.getLogger(__name__)

# Determined's v1LogLevel → Python's logging levels (TRACE has none: DEBUG).
WIRE_LEVELS = {
    "LOG_LEVEL_TRACE": "trace",
    "LOG_LEVEL_DEBUG": "debug",
    "LOG_LEVEL_INFO": "info",
    "LOG_LEVEL_WARNING": "warning",
    "LOG_LEVEL_ERROR": "error",
    "LOG_LEVEL_CRITICAL": "fatal",
}
_PYTHON = {"trace": "DEBUG", "warn": "WARNING", "fatal": "CRITICAL"}

POLL_SECONDS = 2.0


def python_level(level: str) -> int:
    """master.yaml's level name (trace, debug, info, warn(ing), error, fatal) as logging's."""
    name = _PYTHON.get(level, level.upper())
    value = logging.getLevelName(name)
    return value if isinstance(value, int) else logging.INFO


@dataclass(frozen=True, slots=True)
class _Setting:
    key: str
    value: JSONValue
    version: int


def put(conn: Conn, values: Mapping[str, JSONValue]) -> None:
    """Stores settings (``log.level``, ``log.color``) under one new version."""
    version = db.one_int(conn, "SELECT coalesce(max(version), 0) + 1 AS v FROM master_settings")
    for key, value in values.items():
        conn.execute(
            "INSERT INTO master_settings (key, value, version) VALUES (%s, %s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, "
            "version = EXCLUDED.version, updated_at = now()",
            (key, Jsonb(value), version),
        )


def current(conn: Conn) -> tuple[int, JSONObject]:
    """The settings' version (0: none set) and their values."""
    cur = conn.cursor(row_factory=class_row(_Setting))
    rows = cur.execute("SELECT key, value, version FROM master_settings").fetchall()
    return max((r.version for r in rows), default=0), {r.key: r.value for r in rows}


def apply(values: Mapping[str, JSONValue]) -> None:
    """Applies stored settings to this process (the log level of its root logger)."""
    level = values.get("log.level")
    if isinstance(level, str):
        root = logging.getLogger()
        new = python_level(level)
        if root.level != new:
            name = logging.getLevelName(new)
            logger.warning("log level set to %s at run time (process %d)", name, os.getpid())
            root.setLevel(new)
            logger.debug("process %d logs at %s", os.getpid(), name)


def watch_forever(pool: ConnectionPool[Conn], stop: threading.Event) -> None:
    """Applies settings as their version moves, every :data:`POLL_SECONDS`, until ``stop``."""
    seen = -1
    while True:
        try:
            with pool.connection() as conn:
                version = db.one_int(
                    conn, "SELECT coalesce(max(version), 0) AS v FROM master_settings"
                )
                if version != seen:
                    version, values = current(conn)
                    apply(values)
                    seen = version
        except (psycopg.Error, OSError) as e:  # the database blinked: try on the next tick
            logger.debug("cannot read master settings: %s", e)
        except Exception:  # the watcher must outlive any one bad tick
            logger.exception("master settings watcher")
        if stop.wait(POLL_SECONDS):
            return
