"""Session lookups are cached in each API process (det.master.authcache); a revoked session,
a deactivated user and a lost admin flag count from the very next request in every process,
and in every master on the same database once its listener hears of it."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
import requests

from tests.integration.conftest import Master
from tests.integration.test_task_token_cache import ALLOCATION, PATH, TOKEN, _allocation

pytestmark = pytest.mark.integration

# Several user processes: each fresh connection goes to whichever of them takes it.
PROCESSES = {"user_api_processes": 3, "api_processes": 2, "session_cache_seconds": 600}
# Requests on fresh connections, enough that every process serves some of them.
SPREAD = 30


def _status(m: Master, token: str, path: str = "/api/v1/me") -> int:
    # A new connection per request (no session): spread over the processes.
    r = requests.get(m.url + path, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return r.status_code


def _statuses(m: Master, token: str, path: str = "/api/v1/me") -> set[int]:
    return {_status(m, token, path) for _ in range(SPREAD)}


def _user(m: Master, name: str, *, admin: bool = False) -> tuple[int, str]:
    out = m.post(
        "/api/v1/users",
        {"user": {"username": name, "admin": admin, "active": True}, "password": "Pw-12345"},
    )
    return int(out["user"]["id"]), m.login(name, "Pw-12345")


@pytest.fixture
def busy_master(master_factory: Any) -> Master:
    m: Master = master_factory(extra=PROCESSES)
    return m


def test_logout_is_refused_at_once_by_every_process(busy_master: Master) -> None:
    m = busy_master
    _, token = _user(m, "dora")
    assert _statuses(m, token) == {200}  # every process has it cached now
    r = requests.post(
        m.url + "/api/v1/auth/logout", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert r.status_code == 200
    assert _statuses(m, token) == {401}


def test_deactivation_password_and_token_revocation_count_at_once(busy_master: Master) -> None:
    m = busy_master
    uid, token = _user(m, "erin")
    other = m.login("erin", "Pw-12345")
    assert _statuses(m, token) == {200} and _statuses(m, other) == {200}

    # An access token, revoked by its id.
    made = m.post("/api/v1/tokens", {"userId": uid, "description": "ci"})
    assert _statuses(m, made["token"]) == {200}
    r = m.session().patch(
        f"{m.url}/api/v1/tokens/{made['tokenId']}", json={"setRevoked": True}, timeout=30
    )
    assert r.status_code == 200
    assert _statuses(m, made["token"]) == {401}
    assert _statuses(m, token) == {200}  # the user's other sessions live on

    # A password change ends the user's other sessions.
    r = m.session(token).patch(f"{m.url}/api/v1/users/{uid}", json={"password": "Pw-67890"})
    assert r.status_code == 200
    assert _statuses(m, other) == {401}

    # Deactivation by an admin ends them all.
    fresh = m.login("erin", "Pw-67890")
    assert _statuses(m, fresh) == {200}
    r = m.session().patch(f"{m.url}/api/v1/users/{uid}", json={"active": False}, timeout=30)
    assert r.status_code == 200
    assert _statuses(m, fresh) == {401}


def test_a_lost_admin_flag_counts_at_once(busy_master: Master) -> None:
    m = busy_master
    uid, token = _user(m, "fred", admin=True)
    admin_only = "/api/v1/master/config"
    assert _statuses(m, token, admin_only) == {200}
    r = m.session().patch(f"{m.url}/api/v1/users/{uid}", json={"admin": False}, timeout=30)
    assert r.status_code == 200
    assert _statuses(m, token, admin_only) == {403}


def test_another_master_on_the_database_hears_of_a_logout(master_factory: Any) -> None:
    a: Master = master_factory(extra=PROCESSES)
    b: Master = master_factory(extra=PROCESSES)
    token = a.login()
    assert _statuses(a, token) == {200} and _statuses(b, token) == {200}
    r = requests.post(
        a.url + "/api/v1/auth/logout", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert r.status_code == 200
    assert _statuses(a, token) == {401}
    # Master b learns of it by notification, asynchronously: well before the cache's 600 s.
    deadline = time.monotonic() + 10
    while _statuses(b, token) != {401}:
        assert time.monotonic() < deadline, "master b still accepts a token master a revoked"
        time.sleep(0.05)


def test_a_revocation_moves_the_epoch_before_its_commit_returns(pg_url: str) -> None:
    """The synchronous half on its own (no listening thread): the revoking connection's commit
    delivers its own notification, and the epoch every process shares has moved by then."""
    from det.master import authcache, db
    from det.master.services import users

    db.upgrade(pg_url)
    epoch = authcache.Epoch()
    pool = db.open_pool(pg_url, min_size=1, max_size=2, configure=epoch.watch)
    try:
        with pool.connection() as conn:
            users.ensure_admin(conn, "Pw-12345")
            token, _ = users.login(conn, "admin", "Pw-12345", hashed=False, session_hours=1)
        before = epoch.read()
        with pool.connection() as conn:
            assert users.user_for_token(conn, token) is not None
        assert epoch.read() == before  # reads and logins move nothing
        with pool.connection() as conn:
            users.logout(conn, token)
            assert epoch.read() == before  # not before the commit
            conn.commit()
            assert epoch.read() > before
        # The same through a transaction block on an autocommit connection (the API's db()).
        with pool.connection() as conn:
            token, _ = users.login(conn, "admin", "Pw-12345", hashed=False, session_hours=1)
        moved = epoch.read()
        with pool.connection() as conn:
            conn.autocommit = True
            with conn.transaction():
                users.logout(conn, token)
            assert epoch.read() > moved
            conn.autocommit = False
    finally:
        pool.close()


def test_another_masters_end_of_an_allocation_reaches_every_process(
    busy_master: Master, pg_url: str
) -> None:
    """A task's allocation token is cached too (test_task_token_cache): ended by another
    master, the allocation's token is refused by every process once the listener hears it."""
    m = busy_master
    with psycopg.connect(pg_url, autocommit=True) as conn:
        _allocation(conn)

        def statuses() -> set[int]:
            # A new connection per request: spread over the front processes.
            return {
                requests.get(
                    m.url + PATH,
                    headers={"Grpc-Metadata-x-allocation-token": f"Bearer {TOKEN}"},
                    timeout=30,
                ).status_code
                for _ in range(20)
            }

        assert statuses() == {200}  # cached in every process now
        # Not through this master (as another master on the database would): its listener
        # hears the notification and every process's cache forgets.
        conn.execute("UPDATE allocations SET state = 'TERMINATED' WHERE id = %s", (ALLOCATION,))
        deadline = time.monotonic() + 10
        while statuses() != {401}:
            assert time.monotonic() < deadline, "a process still answers the ended allocation"
            time.sleep(0.1)
