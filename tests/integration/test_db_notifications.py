"""``det.master.db.connection.notifications``, the master's wait for PostgreSQL notifications
(the control loop's wake-ups, the listeners of revocations and long-polls), on a real server:
what psycopg's ``notifies`` yields, without its busy last millisecond (bench/idle_master.py
measures that; tests assert no timings)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from det.master.db.connection import notifications

pytestmark = pytest.mark.integration

Pair = tuple[psycopg.Connection[Any], psycopg.Connection[Any]]


@pytest.fixture
def listening(pg_url: str) -> Iterator[Pair]:
    """A connection listening on ``det_test``, and another to notify it."""
    with (
        psycopg.connect(pg_url, autocommit=True) as conn,
        psycopg.connect(pg_url, autocommit=True) as other,
    ):
        conn.execute("LISTEN det_test")
        yield conn, other


def test_a_notification_sent_during_the_wait_ends_it(listening: Pair) -> None:
    conn, other = listening
    timer = threading.Timer(0.2, lambda: other.execute("NOTIFY det_test, 'mid'"))
    timer.start()
    start = time.monotonic()
    got = [n.payload for n in notifications(conn, 30.0, stop_after=1)]
    timer.join()
    assert got == ["mid"]
    assert time.monotonic() - start < 30.0  # it came before the timeout, not with it


def test_nothing_comes_and_the_wait_ends_at_its_timeout(listening: Pair) -> None:
    conn, _ = listening
    start = time.monotonic()
    assert list(notifications(conn, 0.3)) == []
    assert time.monotonic() - start >= 0.3


def test_what_arrived_during_a_query_is_yielded_first(listening: Pair) -> None:
    """Notifications read while the connection ran a statement wait in psycopg's backlog, not
    in the socket: a wait on the socket alone would miss them."""
    conn, other = listening
    other.execute("NOTIFY det_test, 'one'")
    other.execute("NOTIFY det_test, 'two'")
    conn.execute("SELECT pg_sleep(0.1)")  # both are read with its answer
    assert [n.payload for n in notifications(conn, 30.0, stop_after=2)] == ["one", "two"]


def test_every_notification_until_the_timeout_without_stop_after(listening: Pair) -> None:
    conn, other = listening
    sent = threading.Thread(
        target=lambda: [
            (time.sleep(0.05), other.execute(f"NOTIFY det_test, '{i}'")) for i in range(3)
        ]
    )
    sent.start()
    got = [n.payload for n in notifications(conn, 1.0)]
    sent.join()
    assert got == ["0", "1", "2"]


def test_a_lost_connection_raises(listening: Pair) -> None:
    conn, other = listening
    other.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
    with pytest.raises(psycopg.OperationalError):
        list(notifications(conn, 30.0))
