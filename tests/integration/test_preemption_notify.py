"""Preemption long-polls are woken by PostgreSQL (migration 0028, det.master.preemptwait), not
by reading their allocation every quarter of a second."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from det.master import preemptwait, states
from det.master.db import upgrade

pytestmark = pytest.mark.integration

Conn = psycopg.Connection[dict[str, Any]]


@pytest.fixture
def conn(pg_url: str) -> Iterator[Conn]:
    upgrade(pg_url)
    with psycopg.connect(pg_url, row_factory=dict_row, autocommit=True) as c:
        c.execute("INSERT INTO users (username, password_hash) VALUES ('u', 'x')")
        c.execute(
            "INSERT INTO jobs (id, owner_id, resource_pool, priority, queue_key)"
            " VALUES ('j', (SELECT id FROM users LIMIT 1), 'p', 42, 1)"
        )
        for aid in ("a1", "a2"):
            c.execute(
                "INSERT INTO allocations (id, kind, task_id, job_id, resource_pool, slots_needed,"
                " state, token_hash) VALUES (%s, 'COMMAND', %s, 'j', 'p', 1, 'RUNNING', 'h')",
                (aid, aid),
            )
        yield c


def heard(listener: psycopg.Connection[Any]) -> list[str]:
    return [n.payload for n in listener.notifies(timeout=0.5) if n.channel == preemptwait.CHANNEL]


def test_a_preemption_request_or_an_end_notifies_the_allocation_and_nothing_else_does(
    conn: Conn, pg_url: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as listener:
        listener.execute(f"LISTEN {preemptwait.CHANNEL}")
        conn.execute("UPDATE allocations SET preempt_acked = true, exit_reason = 'x'")
        conn.execute("UPDATE allocations SET state = 'RUNNING'")
        assert heard(listener) == []
        conn.execute("UPDATE allocations SET preempt_requested = true WHERE id = 'a1'")
        assert heard(listener) == ["a1"]
        conn.execute("UPDATE allocations SET preempt_requested = true WHERE id = 'a1'")
        assert heard(listener) == []  # already asked
        with conn.transaction():
            assert states.transition(conn, "allocation", "a2", states.TERMINATED, "ended")
        assert heard(listener) == ["a2"]
        # Rolled back: nobody is told.
        with pytest.raises(RuntimeError), conn.transaction():
            conn.execute("UPDATE allocations SET state = 'TERMINATED' WHERE id = 'a1'")
            raise RuntimeError("rollback")
        assert heard(listener) == []


def wait_until(cond: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_waiters_are_woken_by_their_allocations_notification_only(conn: Conn, pg_url: str) -> None:
    w = preemptwait.Waiters(pg_url)
    assert w.wait_seconds() == preemptwait.POLL_SECONDS  # nothing heard yet: read the row
    first, other = w.register("a1"), w.register("a2")
    wait_until(lambda: w.listening, "the listener")
    # Listening: a waiter reads its row again only when it is woken.
    assert w.wait_seconds() == preemptwait.UNTIL_WOKEN
    first.clear()
    other.clear()  # the listener's start woke everyone once
    conn.execute("UPDATE allocations SET preempt_requested = true WHERE id = 'a1'")
    assert first.wait(30)
    assert not other.is_set()
    w.unregister("a1", first)
    w.unregister("a2", other)
    w.close()


def test_a_long_polls_wait_is_cut_short_by_the_notification(conn: Conn, pg_url: str) -> None:
    """The route's loop as a waiter runs it: register, read, wait; a change committed between
    the read and the wait still wakes it."""
    w = preemptwait.Waiters(pg_url)
    woken = w.register("a1")
    wait_until(lambda: w.listening, "the listener")
    woken.clear()
    row = conn.execute("SELECT preempt_requested FROM allocations WHERE id = 'a1'").fetchone()
    assert row == {"preempt_requested": False}
    done = threading.Event()
    conn.execute("UPDATE allocations SET preempt_requested = true WHERE id = 'a1'")
    # Waiting after the commit: the event is already set, the wait does not sleep.
    threading.Thread(target=lambda: (woken.wait(w.wait_seconds()), done.set())).start()
    assert done.wait(30)
    assert woken.is_set()
    w.unregister("a1", woken)
    w.close()


def test_the_listeners_lost_connection_wakes_every_waiter_to_read_its_row(
    conn: Conn, pg_url: str
) -> None:
    """The one way a notification is lost is with the listening connection: when it goes, every
    waiter is woken (and reads its row every POLL_SECONDS until the listener is back), since a
    waiter no longer reads its row on a timer while the listener listens."""
    w = preemptwait.Waiters(pg_url)
    woken = w.register("a1")
    wait_until(lambda: w.listening, "the listener")
    woken.clear()  # the listener's start woke everyone once
    # The listener's session: the only other one on this test's database.
    ended = conn.execute(
        "SELECT pg_terminate_backend(pid) AS ended FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        " AND backend_type = 'client backend'"
    ).fetchall()
    assert ended == [{"ended": True}]
    assert woken.wait(30)
    # It listens again, and wakes everyone once more: what changed meanwhile was not heard.
    woken.clear()
    wait_until(lambda: w.listening, "the listener back")
    assert woken.wait(30)
    assert w.wait_seconds() == preemptwait.UNTIL_WOKEN
    w.unregister("a1", woken)
    w.close()
