"""The leader lock on a real PostgreSQL: a standby waits inside the server, not in a poll, and
leads the moment the leader's process dies."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import psycopg

from det.master import db, leader_lock
from det.master.db import LEADER_LOCK_KEY

# A leader in its own process: takes the lock, says so, then idles until killed.
LEADER = textwrap.dedent(
    """
    import sys, threading
    from det.master import leader_lock
    conn = leader_lock.connect(sys.argv[1])
    assert leader_lock.wait_for_lead(conn, threading.Event())
    print(conn.info.backend_pid, flush=True)
    threading.Event().wait()
    """
)


def activity(pg_url: str, pid: int) -> dict[str, Any]:
    with psycopg.connect(pg_url, autocommit=True) as c:
        row = c.execute(
            "SELECT state, wait_event_type, wait_event, query, query_start"
            " FROM pg_stat_activity WHERE pid = %s",
            (pid,),
        ).fetchone()
    assert row is not None, f"backend {pid} is gone"
    keys = ("state", "wait_event_type", "wait_event", "query", "query_start")
    return dict(zip(keys, row, strict=True))


def holder(pg_url: str) -> int | None:
    """The backend holding this database's leader lock, if any (advisory locks are per
    database: masters of other databases on the same server hold theirs)."""
    with psycopg.connect(pg_url, autocommit=True) as c:
        row = c.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND ((classid::bigint << 32) | objid::bigint) = %s",
            (LEADER_LOCK_KEY,),
        ).fetchone()
    return int(row[0]) if row else None


def wait_until(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def start_waiting(conn: Any, stop: threading.Event) -> tuple[threading.Thread, list[bool]]:
    result: list[bool] = []
    t = threading.Thread(target=lambda: result.append(leader_lock.wait_for_lead(conn, stop)))
    t.start()
    return t, result


def test_standby_waits_in_postgresql_and_leads_when_the_leader_is_killed(pg_url: str) -> None:
    # Timeouts a database may set for everyone must not end the standby's wait.
    with psycopg.connect(pg_url, autocommit=True) as c:
        dbname = c.info.dbname
        c.execute(f"ALTER DATABASE \"{dbname}\" SET statement_timeout = '300ms'")
        c.execute(f"ALTER DATABASE \"{dbname}\" SET lock_timeout = '300ms'")
    leader = subprocess.Popen(
        [sys.executable, "-c", LEADER, pg_url], stdout=subprocess.PIPE, text=True
    )
    standby = leader_lock.connect(pg_url)
    stop = threading.Event()
    try:
        assert leader.stdout is not None
        leader_pid = int(leader.stdout.readline())
        assert holder(pg_url) == leader_pid
        me = standby.info.backend_pid
        t, result = start_waiting(standby, stop)
        wait_until(
            lambda: activity(pg_url, me)["wait_event"] == "advisory", 30, "the standby's wait"
        )
        waiting = activity(pg_url, me)
        assert waiting["state"] == "active" and waiting["wait_event_type"] == "Lock"
        assert "pg_advisory_lock" in waiting["query"]
        # Longer than the old 1 s poll and the database's timeouts: still the same statement.
        time.sleep(1.5)
        assert activity(pg_url, me) == waiting
        assert t.is_alive() and holder(pg_url) == leader_pid

        leader.send_signal(signal.SIGKILL)
        t.join(timeout=30)
        assert result == [True]
        assert holder(pg_url) == me
        # The lock went to the statement that had been waiting since before the kill.
        after = activity(pg_url, me)
        assert after["query_start"] == waiting["query_start"] and after["state"] == "idle"
    finally:
        stop.set()
        leader.kill()
        leader.wait(timeout=30)
        if leader.stdout is not None:
            leader.stdout.close()
        standby.close()


def test_stopping_a_standby_cancels_its_wait(pg_url: str) -> None:
    first = leader_lock.connect(pg_url)
    second = leader_lock.connect(pg_url)
    stop = threading.Event()
    try:
        assert leader_lock.wait_for_lead(first, threading.Event())
        me = second.info.backend_pid
        t, result = start_waiting(second, stop)
        wait_until(lambda: activity(pg_url, me)["wait_event"] == "advisory", 30, "the wait")
        stop.set()
        t.join(timeout=30)
        assert result == [False]
        assert activity(pg_url, me)["state"] == "idle"
        assert holder(pg_url) == first.info.backend_pid
        # A stopped standby does not even start waiting.
        assert leader_lock.wait_for_lead(second, stop) is False
    finally:
        first.close()
        second.close()


def test_the_lock_session_keeps_no_timeouts_the_database_sets(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute(f"ALTER DATABASE \"{c.info.dbname}\" SET statement_timeout = '300ms'")
    with leader_lock.connect(pg_url) as conn:
        shown = [db.scalar(conn, str, f"SHOW {n}") for n in ("statement_timeout", "lock_timeout")]
        assert shown == ["0", "0"]
