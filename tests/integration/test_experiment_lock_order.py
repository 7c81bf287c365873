"""A user's action on an experiment takes its rows' locks in the order the control loop takes
them (the experiment, then its allocations, then its trials: master/services/experiments.py),
so that it waits for an allocation's end instead of deadlocking with it. CI found a cancel
answered 500: PostgreSQL's deadlock detector had aborted it (the cancel held its trials' rows
and wanted an allocation's; the loop, ending that allocation, held it and wanted the trial)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
import pytest
from psycopg.rows import dict_row

from det.master.db import Conn
from det.master.services import experiments, trials

pytestmark = pytest.mark.integration

ALLOCATION = "alloc-lock-order"


def _seed(url: str) -> tuple[int, int]:
    """An ACTIVE experiment with one ACTIVE trial whose allocation is RUNNING."""
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as c:
        uid = c.execute(
            "INSERT INTO users (username, password_hash) VALUES ('owner', 'x') RETURNING id"
        ).fetchone()["id"]  # type: ignore[index]
        eid = c.execute(
            "INSERT INTO experiments (name, config, original_config, state, owner_id)"
            " VALUES ('e', '{}', '', 'ACTIVE', %s) RETURNING id",
            (uid,),
        ).fetchone()["id"]  # type: ignore[index]
        c.execute(
            "INSERT INTO jobs (id, experiment_id, owner_id, resource_pool, priority, queue_key)"
            " VALUES (%s, %s, %s, 'default', 42, 0)",
            (f"job-{eid}", eid, uid),
        )
        tid = c.execute(
            "INSERT INTO trials (experiment_id, request_id, task_id, hparams, seed, state)"
            " VALUES (%s, 'r1', %s, '{}', 1, 'ACTIVE') RETURNING id",
            (eid, f"{eid}.1"),
        ).fetchone()["id"]  # type: ignore[index]
        c.execute(
            "INSERT INTO allocations (id, kind, task_id, trial_id, job_id, resource_pool,"
            " slots_needed, state, placement, token_hash, placed_at)"
            " VALUES (%s, 'TRIAL', %s, %s, %s, 'default', 1, 'RUNNING', '{}', 'x', now())",
            (ALLOCATION, f"{eid}.1", tid, f"job-{eid}"),
        )
    return int(eid), int(tid)


def _waiting_on_a_lock(url: str, pid: int) -> bool:
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,))
        found = row.fetchone()
    return found is not None and found[0] == "Lock"


#: A user's action on the experiment or its trial: (connection, experiment id, trial id).
ACTIONS: dict[str, Callable[[Conn, int, int], None]] = {
    "cancel": lambda conn, eid, _tid: experiments.cancel(conn, eid),
    "pause": lambda conn, eid, _tid: experiments.pause(conn, eid),
    "kill": lambda conn, eid, _tid: experiments.kill(conn, eid),
    "kill the trial": lambda conn, _eid, tid: trials.kill(conn, tid),
}


@pytest.mark.parametrize("action", ACTIONS)
def test_an_action_racing_an_allocations_end_waits_for_it_instead_of_deadlocking(
    migrated_db: str, action: str
) -> None:
    """The loop ends the allocation (its row locked first), the user's action starts and waits
    on that row, then the loop moves the trial (its row locked second) and commits: the action
    must not hold the trial's row by then (it did: a deadlock, and one of the two aborted)."""
    eid, tid = _seed(migrated_db)
    errors: list[BaseException] = []
    with (
        psycopg.connect(migrated_db, row_factory=dict_row) as loop,
        psycopg.connect(migrated_db, row_factory=dict_row) as user,
    ):
        loop.execute("UPDATE allocations SET state = 'TERMINATED' WHERE id = %s", (ALLOCATION,))

        def act() -> None:
            try:
                with user.transaction():
                    ACTIONS[action](user, eid, tid)
            except BaseException as e:  # handed to the test's thread
                errors.append(e)

        thread = threading.Thread(target=act, name="user-action")
        thread.start()
        try:
            deadline = time.monotonic() + 10
            while not _waiting_on_a_lock(migrated_db, user.info.backend_pid):
                assert thread.is_alive() and time.monotonic() < deadline, (
                    f"the action never waited on the allocation's row: {errors}"
                )
                time.sleep(0.02)
            loop.execute("UPDATE trials SET state = state WHERE id = %s", (tid,))
            loop.commit()
        finally:
            thread.join(30)
    assert not thread.is_alive()
    assert not errors, errors
