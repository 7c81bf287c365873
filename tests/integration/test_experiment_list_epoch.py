"""The experiment list's kept pages checked in memory while a master is alone on its database
(det.master.listcache.validity, migration 0047): no statement per read, and a change the list
shows, committed on one of the master's own connections, has moved the epoch when its commit
returns; with another master on the database (or no listener), the version is read each time,
as before."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from det.master import authcache, db, listcache

pytestmark = pytest.mark.integration


class Counting:
    """A connection whose cursors count the statements they run."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.statements = 0

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        return _CountingCursor(self, self.conn.cursor(*args, **kwargs))

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        self.statements += 1
        return self.conn.execute(*args, **kwargs)


class _CountingCursor:
    def __init__(self, owner: Counting, cur: Any) -> None:
        self.owner, self.cur = owner, cur

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        self.owner.statements += 1
        return self.cur.execute(*args, **kwargs)  # the cursor itself: its fetch* as usual


@pytest.fixture
def epoch(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[authcache.Epoch]:
    db.upgrade(pg_url)
    e = authcache.Epoch(listcache.CHANNEL)
    monkeypatch.setattr(listcache, "EPOCH", e)
    monkeypatch.setattr(listcache, "_memo", None)
    yield e


def _new_experiment(c: psycopg.Connection[Any], name: str) -> None:
    c.execute("INSERT INTO users (username, password_hash) VALUES (%s, 'x')", (f"o-{name}",))
    c.execute(
        "INSERT INTO experiments (name, config, original_config, state, owner_id)"
        " VALUES (%s, '{\"searcher\": {\"name\": \"single\"}}', '', 'PAUSED',"
        " (SELECT id FROM users WHERE username = %s))",
        (name, f"o-{name}"),
    )


def test_alone_a_read_runs_no_statement_and_an_own_commit_moves_the_epoch_before_it_returns(
    pg_url: str, epoch: authcache.Epoch
) -> None:
    with (
        psycopg.connect(pg_url, autocommit=True) as own,
        psycopg.connect(pg_url, autocommit=True) as other,
        psycopg.connect(pg_url, autocommit=True) as raw,
    ):
        epoch.watch(own)  # one of the master's pooled connections
        epoch.set_listening(True)
        epoch.set_alone(True)
        reader = Counting(raw)
        first = listcache.validity(reader, "experiments")  # type: ignore[arg-type]
        assert reader.statements == 1  # whether a workspace is private, read once an epoch
        assert first.private is False
        for _ in range(3):
            assert listcache.validity(reader, "experiments") == first  # type: ignore[arg-type]
        assert reader.statements == 1

        # A change the list shows, committed by the master: the epoch has moved when the
        # commit returns (the connection heard its own notification with it).
        with own.transaction():
            _new_experiment(own, "mine")
        after = listcache.validity(reader, "experiments")  # type: ignore[arg-type]
        assert after.version != first.version
        assert reader.statements == 2

        # A workspace added (not private) leaves it; one turned private moves it, and the next
        # read knows.
        before = epoch.read()
        with own.transaction():
            own.execute("INSERT INTO workspaces (name) VALUES ('open')")
        assert epoch.read() == before
        with own.transaction():
            own.execute("UPDATE workspaces SET private = true WHERE id = 1")
        private = listcache.validity(reader, "experiments")  # type: ignore[arg-type]
        assert private.version != after.version and private.private is True
        with own.transaction():
            own.execute("UPDATE workspaces SET private = false WHERE id = 1")
            own.execute("INSERT INTO workspaces (name, private) VALUES ('closed', true)")
        added = listcache.validity(reader, "experiments")  # type: ignore[arg-type]
        assert added.version != private.version and added.private is True

        # What the list does not show leaves it (a password change: the sessions' channel).
        before = epoch.read()
        with own.transaction():
            own.execute("UPDATE users SET password_hash = 'y' WHERE username = 'o-mine'")
        assert epoch.read() == before

        # Another session's commit (another master, psql) reaches this master only through its
        # listener: not at once, which is why the epoch is used only while the master is alone.
        with other.transaction():
            _new_experiment(other, "theirs")
        assert epoch.read() == before


def test_not_alone_or_not_listening_the_version_is_read_each_time(
    pg_url: str, epoch: authcache.Epoch
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as raw:
        reader = Counting(raw)
        for listening, alone in ((True, False), (False, True), (False, False)):
            epoch.set_listening(listening)
            epoch.set_alone(alone)
            before = reader.statements
            a = listcache.validity(reader, "experiments")  # type: ignore[arg-type]
            b = listcache.validity(reader, "experiments")  # type: ignore[arg-type]
            assert reader.statements == before + 2, (listening, alone)
            assert a == b and not a.version.startswith("epoch"), (listening, alone)


def test_a_listener_alone_finds_it_at_its_first_look_not_a_probe_period_later(
    pg_url: str, epoch: authcache.Epoch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listener looks for other masters as soon as it listens: a master's pages are checked
    in memory from its start, instead of being re-read once a probe period later when the epoch
    moves on becoming alone (under load, after the first requests were answered)."""
    monkeypatch.setattr(authcache, "PRESENCE_SECONDS", 60.0)  # the next look: a minute away
    stop = threading.Event()
    listener = threading.Thread(
        target=authcache.listen_forever,
        args=(pg_url, [epoch], stop),
        kwargs={"presence": (epoch, "lone-master")},
        daemon=True,
    )
    listener.start()
    try:
        deadline = time.monotonic() + 20
        while not (epoch.listening and epoch.alone) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert epoch.listening and epoch.alone
        settled = epoch.read()
        time.sleep(0.5)
        assert epoch.read() == settled  # no later move while nothing changed
    finally:
        stop.set()
        # Its wait for notifications lasts the probe period: end its connection to end it now.
        with psycopg.connect(pg_url, autocommit=True) as c:
            c.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s",
                (authcache.application_name("lone-master", listener=True),),
            )
        listener.join(10)
    assert not listener.is_alive()
