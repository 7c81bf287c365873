"""The task-kind registry (``services.task_kinds``) and the ``allocations.kind`` column it
dispatches on: the column's CHECK, the ``Kind`` type and the registry name the same kinds, and
the migration that added the column gives rows queued before it the kind the master used to
decide by probing (a trial's allocation, an interactive task's, else a checkpoint GC's)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, get_args

import psycopg
import pytest

from det.master import db
from det.master.services import allocation_rows, task_kinds

MIGRATION = "allocation_kind"


def _check_kinds(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = 'allocations'::regclass AND conname = 'allocations_kind'"
        ).fetchone()
    assert row is not None, "allocations has no CHECK named allocations_kind"
    return set(re.findall(r"'([A-Z_]+)'", row[0]))


def test_every_kind_the_column_admits_has_a_registered_module_and_no_other(
    migrated_db: str,
) -> None:
    admitted = _check_kinds(migrated_db)
    assert admitted == set(task_kinds.KINDS) == set(get_args(allocation_rows.Kind))
    # The names are the API's task types (v1TaskType without its prefix).
    assert admitted == {"TRIAL", "COMMAND", "NOTEBOOK", "SHELL", "TENSORBOARD", "CHECKPOINT_GC"}
    for kind, entry in task_kinds.KINDS.items():
        assert callable(entry.container_spec) and callable(entry.on_terminated), kind


def test_the_column_refuses_an_unknown_kind_and_a_missing_one(migrated_db: str) -> None:
    insert = (
        "INSERT INTO allocations (id, kind, task_id, job_id, resource_pool, slots_needed,"
        " state, token_hash) VALUES ('x.1', %s, 'x', 'j', 'default', 0, 'PENDING', 'h')"
    )
    with psycopg.connect(migrated_db, autocommit=True) as c:
        with pytest.raises(psycopg.errors.CheckViolation, match="allocations_kind"):
            c.execute(insert, ("GENERIC",))
        with pytest.raises(psycopg.errors.NotNullViolation, match="kind"):
            c.execute(insert, (None,))
        assert c.execute("SELECT count(*) FROM allocations").fetchone() == (0,)


def test_an_unregistered_kind_is_a_clear_error() -> None:
    alloc = allocation_rows.Allocation(
        id="x.1",
        kind="GENERIC",  # type: ignore[arg-type]  # what the CHECK keeps out of the table
        task_id="x",
        trial_id=None,
        job_id="j",
        resource_pool="default",
        slots_needed=0,
        state="PENDING",
        placement=None,
        preempt_requested=False,
        kill_requested=False,
        container_id=None,
        exit_code=None,
        exit_reason=None,
        created_at=dt.datetime.now(dt.UTC),
    )
    with pytest.raises(ValueError, match=r"allocations\.kind: no task kind 'GENERIC'"):
        task_kinds.of(alloc)


def _at_previous_migration(url: str) -> int:
    """Migrates ``url`` up to the one before the kind column's; returns that one's number."""
    (target,) = [v for v, name, _ in db._migrations() if name == MIGRATION]
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(
            "CREATE TABLE schema_migrations (version int PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version, name, sql in db._migrations():
            if version >= target:
                break
            c.execute(sql.encode())
            c.execute("INSERT INTO schema_migrations VALUES (%s, %s)", (version, name))
    return target


def _old_allocation(c: psycopg.Connection[Any], aid: str, task_id: str, **extra: Any) -> None:
    """An allocation as the code before the kind column queued it (no kind)."""
    c.execute(
        "INSERT INTO allocations (id, task_id, trial_id, job_id, resource_pool, slots_needed,"
        " state, token_hash) VALUES (%s, %s, %s, %s, 'default', %s, %s, 'h')",
        (
            aid,
            task_id,
            extra.get("trial_id"),
            extra.get("job_id", "job-e"),
            extra.get("slots", 1),
            extra.get("state", "TERMINATED"),
        ),
    )


def test_the_migration_gives_old_rows_the_kind_the_probes_decided(pg_url: str) -> None:
    target = _at_previous_migration(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as c:
        uid = c.execute(
            "INSERT INTO users (username, password_hash) VALUES ('u', 'x') RETURNING id"
        ).fetchone()[0]  # type: ignore[index]
        eid = c.execute(
            "INSERT INTO experiments (name, config, original_config, state, owner_id)"
            " VALUES ('e', '{}', '', 'COMPLETED', %s) RETURNING id",
            (uid,),
        ).fetchone()[0]  # type: ignore[index]
        c.execute(
            "INSERT INTO jobs (id, kind, experiment_id, owner_id, resource_pool, priority,"
            " weight, queue_key) VALUES ('job-e', 'EXPERIMENT', %s, %s, 'default', 42, 1, 1)",
            (eid, uid),
        )
        tid = c.execute(
            "INSERT INTO trials (experiment_id, task_id, request_id, hparams, state, seed)"
            " VALUES (%s, 'trial-task', 'r', '{}', 'COMPLETED', 1) RETURNING id",
            (eid,),
        ).fetchone()[0]  # type: ignore[index]
        _old_allocation(c, "trial-task.1", "trial-task", trial_id=tid)
        _old_allocation(c, "trial-task.2", "trial-task", trial_id=tid, state="RUNNING")
        for i, kind in enumerate(("COMMAND", "NOTEBOOK", "SHELL", "TENSORBOARD")):
            task = f"task-{kind.lower()}"
            c.execute(
                "INSERT INTO jobs (id, kind, owner_id, resource_pool, priority, weight,"
                " queue_key) VALUES (%s, %s, %s, 'default', 42, 1, %s)",
                (f"job-{task}", kind, uid, i + 2),
            )
            c.execute(
                "INSERT INTO ntsc_tasks (id, kind, owner_id, job_id, config)"
                " VALUES (%s, %s, %s, %s, '{}')",
                (task, kind, uid, f"job-{task}"),
            )
            _old_allocation(c, f"{task}.1", task, job_id=f"job-{task}")
        _old_allocation(c, f"gc.{eid}.1", f"gc.{eid}", slots=0)
        c.execute(
            "INSERT INTO checkpoint_gc (allocation_id, experiment_id, uuids) VALUES (%s, %s, '{}')",
            (f"gc.{eid}.1", eid),
        )
        # A GC allocation whose checkpoint_gc row is gone: the probes called it a GC too.
        _old_allocation(c, f"gc.{eid}.2", f"gc.{eid}", slots=0)

    assert db.upgrade(pg_url) == [v for v, _, _ in db._migrations() if v >= target]

    with psycopg.connect(pg_url, autocommit=True) as c:
        kinds = dict(c.execute("SELECT id, kind FROM allocations ORDER BY id").fetchall())
    assert kinds == {
        "trial-task.1": "TRIAL",
        "trial-task.2": "TRIAL",
        "task-command.1": "COMMAND",
        "task-notebook.1": "NOTEBOOK",
        "task-shell.1": "SHELL",
        "task-tensorboard.1": "TENSORBOARD",
        f"gc.{eid}.1": "CHECKPOINT_GC",
        f"gc.{eid}.2": "CHECKPOINT_GC",
    }
    assert _check_kinds(pg_url) == set(task_kinds.KINDS)
