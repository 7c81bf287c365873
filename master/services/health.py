"""What ``/health`` checks: the database answers."""

from __future__ import annotations

from det.master.db import Conn


def check_database(conn: Conn) -> None:
    """Raises the driver's error when the database does not answer a trivial query."""
    conn.execute("SELECT 1")
