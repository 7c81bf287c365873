"""What the master benchmarks share: a private PostgreSQL with an empty ``bench`` database,
and the ``--set KEY=YAML`` options that become master.yaml keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import yaml


def bench_database(tmp: Path) -> tuple[Any, str]:
    """Starts ``pgserver`` under ``tmp`` and creates ``bench`` in it; returns the server
    (stopped when it is collected or cleaned up) and the new database's URL."""
    import pgserver  # a test extra, only needed once a benchmark runs

    from det.master.db.embedded import ensure_server_user

    ensure_server_user()  # made under the machine's lock (tests may start servers beside it)
    server = pgserver.get_server(tmp / "pg", cleanup_mode="stop")
    base = server.get_uri()
    with psycopg.connect(base, autocommit=True) as c:
        c.execute("CREATE DATABASE bench")
    head, sep, q = base.partition("?")
    return server, head.rsplit("/", 1)[0] + "/bench" + sep + q


def master_settings(items: list[str]) -> dict[str, Any]:
    """``KEY=YAML`` strings as a dict of master.yaml keys (the value parsed as YAML)."""
    extra: dict[str, Any] = {}
    for item in items:
        key, _, value = item.partition("=")
        extra[key] = yaml.safe_load(value)
    return extra
