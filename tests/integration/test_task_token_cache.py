"""A task's allocation token is looked up once per API process and cached under the auth epoch
(det.master.api._common, migration 0051), as sessions are: the allocation's end counts from the
very next request when this master ended it (and in every process of every master once its
listener hears of it: test_master_session_cache)."""

from __future__ import annotations

from typing import Any

import pytest

from det.master.services import users

pytestmark = pytest.mark.integration

TOKEN = "a-task-token-for-the-cache-test"
ALLOCATION = "cache-test.1"
PATH = f"/api/v1/allocations/{ALLOCATION}/signals/preemption?timeoutSeconds=0"


def _allocation(conn: Any) -> None:
    conn.execute(
        "INSERT INTO allocations (id, kind, task_id, job_id, resource_pool, slots_needed, state,"
        " token_hash) VALUES (%s, 'TRIAL', 'cache-test', 'j', 'default', 1, 'RUNNING', %s)",
        (ALLOCATION, users.token_digest(TOKEN)),
    )


def _ask(m: Any) -> int:
    """The task's request, with its allocation token alone."""
    s = m.new_session()
    r = s.get(
        m.url + PATH, headers={"Grpc-Metadata-x-allocation-token": f"Bearer {TOKEN}"}, timeout=30
    )
    return int(r.status_code)


def test_a_token_is_looked_up_once_and_refused_once_its_allocation_ends(
    api_master: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = api_master
    with m.state.pool.connection() as conn:
        _allocation(conn)
    # The cache is used while this master hears other masters' revocations (its listener's
    # state; the in-process master runs none).
    m.state.auth_epoch.set_listening(True)
    looked_up = []
    real = users.allocation_for_digest

    def counted(conn: Any, digest: str) -> Any:
        looked_up.append(digest)
        return real(conn, digest)

    monkeypatch.setattr(users, "allocation_for_digest", counted)
    assert [_ask(m) for _ in range(5)] == [200] * 5
    assert len(looked_up) == 1

    # Ended through this master's own connection: its commit moves the epoch before it returns.
    with m.state.pool.connection() as conn:
        conn.execute("UPDATE allocations SET state = 'TERMINATED' WHERE id = %s", (ALLOCATION,))
    assert _ask(m) == 401
    assert len(looked_up) == 2
    assert _ask(m) == 401  # an ended allocation's token is never cached
    assert len(looked_up) == 3
