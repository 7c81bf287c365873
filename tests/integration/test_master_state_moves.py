"""The state module's moves on a real PostgreSQL: each writes only what its table allows, and a
forbidden move is refused and changes nothing."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from det.master import states
from det.master.db import upgrade
from det.master.errors import Conflict
from det.master.provisioner.provider import Instance, InstanceState

pytestmark = pytest.mark.integration

Conn = psycopg.Connection[dict[str, Any]]


@pytest.fixture
def conn(pg_url: str) -> Iterator[Conn]:
    upgrade(pg_url)
    with psycopg.connect(pg_url, row_factory=dict_row, autocommit=True) as c:
        c.execute("INSERT INTO users (username, password_hash) VALUES ('u', 'x')")
        yield c


def experiment(conn: Conn, state: str, trial_states: tuple[str, ...] = ()) -> int:
    eid: int = conn.execute(
        "INSERT INTO experiments (name, config, original_config, state, owner_id)"
        " VALUES ('e', '{}', '', %s, (SELECT id FROM users LIMIT 1)) RETURNING id",
        (state,),
    ).fetchone()["id"]  # type: ignore[index]
    for i, ts in enumerate(trial_states):
        conn.execute(
            "INSERT INTO trials (experiment_id, request_id, task_id, hparams, seed, state)"
            " VALUES (%s, %s, %s, '{}', 1, %s)",
            (eid, f"r{i}", f"{eid}.{i}", ts),
        )
    return eid


def column(conn: Conn, sql: str, *args: Any) -> list[Any]:
    return [next(iter(r.values())) for r in conn.execute(sql, args).fetchall()]


def test_trials_move_together_only_as_the_table_allows(conn: Conn) -> None:
    eid = experiment(conn, "ACTIVE", ("PAUSED", "PAUSED", "COMPLETED"))
    states.experiment_trials(conn, eid, states.PAUSED, states.ACTIVE)
    assert sorted(column(conn, "SELECT state FROM trials ORDER BY id")) == [
        "ACTIVE",
        "ACTIVE",
        "COMPLETED",
    ]
    with pytest.raises(ValueError, match="COMPLETED -> ACTIVE is not in its transition table"):
        states.experiment_trials(conn, eid, states.COMPLETED, states.ACTIVE)
    assert column(conn, "SELECT state FROM trials WHERE state = 'COMPLETED'") == ["COMPLETED"]


def test_only_an_ended_experiment_becomes_deleting(conn: Conn) -> None:
    live = experiment(conn, "ACTIVE")
    with pytest.raises(Conflict, match="ACTIVE; it cannot become DELETING"):
        states.experiment_deleted(conn, live, "deleted by user")
    assert column(conn, "SELECT state || deleted::text FROM experiments WHERE id = %s", live) == [
        "ACTIVEfalse"
    ]
    done = experiment(conn, "COMPLETED")
    states.experiment_deleted(conn, done, "deleted by user")
    assert column(conn, "SELECT state || deleted::text FROM experiments WHERE id = %s", done) == [
        "DELETINGtrue"
    ]
    assert column(conn, "SELECT message FROM events WHERE entity_id = %s", str(done)) == [
        "deleted by user"
    ]


def test_continue_revives_only_an_ended_experiment_and_trial(conn: Conn) -> None:
    eid = experiment(conn, "PAUSED", ("PAUSED",))
    tid = column(conn, "SELECT id FROM trials WHERE experiment_id = %s", eid)[0]
    with pytest.raises(Conflict, match="is PAUSED; only one that ended can be continued"):
        states.continue_experiment(conn, eid, tid, {"x": 1}, "continued", "continued")
    assert column(conn, "SELECT state FROM experiments WHERE id = %s", eid) == ["PAUSED"]
    conn.execute("UPDATE experiments SET state = 'COMPLETED', ended_at = now()")
    conn.execute("UPDATE trials SET state = 'CANCELED', ended_at = now(), stop_reason = 'x'")
    states.continue_experiment(conn, eid, tid, {"x": 1}, "by user", "resumed")
    assert conn.execute(
        "SELECT e.state, e.ended_at, e.config, t.state AS t_state, t.stop_reason"
        " FROM experiments e JOIN trials t ON t.experiment_id = e.id"
    ).fetchone() == {
        "state": "ACTIVE",
        "ended_at": None,
        "config": {"x": 1},
        "t_state": "ACTIVE",
        "stop_reason": None,
    }
    assert sorted(column(conn, "SELECT message FROM events")) == [
        "CANCELED -> ACTIVE: resumed",
        "COMPLETED -> ACTIVE: by user",
    ]
    # An experiment cannot be revived by an ordinary move.
    assert not states.can_transition("experiment", "COMPLETED", "ACTIVE")


def test_a_deleted_checkpoint_gets_no_files_back(conn: Conn) -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    for u in (a, b):
        conn.execute(
            'INSERT INTO checkpoints (uuid, resources) VALUES (%s, \'{"f": 1, "g": 2}\')', (u,)
        )
    states.checkpoint_files_left(conn, str(a), {"g": 2})
    states.checkpoint_files_left(conn, str(a), {"g": 2})  # the same report again
    assert column(conn, "SELECT state FROM checkpoints WHERE uuid = %s", a) == ["PARTIALLY_DELETED"]
    states.checkpoint_files_left(conn, str(a), {})
    states.checkpoint_files_left(conn, str(a), {})
    with pytest.raises(Conflict, match="is DELETED; it cannot become PARTIALLY_DELETED"):
        states.checkpoint_files_left(conn, str(a), {"g": 2})
    assert conn.execute(
        "SELECT state, resources FROM checkpoints WHERE uuid = %s", (a,)
    ).fetchone() == {
        "state": "DELETED",
        "resources": {},
    }
    assert states.checkpoints_deleted(conn, [a, b]) == 1  # a was already deleted
    assert column(conn, "SELECT resources FROM checkpoints WHERE uuid = %s", b) == [{}]


def test_placements_move_only_pending_allocations(conn: Conn) -> None:
    conn.execute(
        "INSERT INTO jobs (id, owner_id, resource_pool, priority, queue_key)"
        " VALUES ('j', (SELECT id FROM users LIMIT 1), 'p', 42, 1)"
    )
    for aid, state in (("a1", "PENDING"), ("a2", "RUNNING")):
        conn.execute(
            "INSERT INTO allocations (id, kind, task_id, job_id, resource_pool, slots_needed,"
            " state, token_hash) VALUES (%s, 'COMMAND', %s, 'j', 'p', 1, %s, 'h')",
            (aid, aid, state),
        )
    moved = states.allocations_placed(conn, {"a1": {"agent": ["0"]}, "a2": {"agent": ["1"]}})
    assert moved == ["a1"]
    assert conn.execute("SELECT state, placement FROM allocations ORDER BY id").fetchall() == [
        {"state": "ASSIGNED", "placement": {"agent": ["0"]}},
        {"state": "RUNNING", "placement": None},
    ]


def test_a_terminated_instance_is_not_asked_to_terminate_again(conn: Conn) -> None:
    now = dt.datetime.now(dt.UTC)
    listed = [
        Instance("i-run", InstanceState.RUNNING, now, "m5.large"),
        Instance("i-gone", InstanceState.RUNNING, now, "m5.large"),
    ]
    states.instances_listed(conn, "p", listed)
    states.instances_listed(conn, "p", listed[:1])  # i-gone no longer listed: it ended
    states.instances_terminating(conn, {"i-run": "idle", "i-gone": "idle"})
    assert conn.execute("SELECT id, state, reason FROM instances ORDER BY id").fetchall() == [
        {"id": "i-gone", "state": "terminated", "reason": None},
        {"id": "i-run", "state": "terminating", "reason": "idle"},
    ]
    # What the cloud lists is recorded as it says, even after the master asked.
    states.instances_listed(conn, "p", listed[:1])
    assert column(conn, "SELECT state FROM instances WHERE id = 'i-run'") == ["running"]
