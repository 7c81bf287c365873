"""Task log retention: which tasks' logs have expired, and deleting them without stalling
ingest.

A task's logs expire ``days`` after the task ended: a trial's own ``log_retention_days``
(``det trial|e set log-retention``), else the master's ``retention_policy.log_retention_days``;
-1 keeps them forever. A task has ended when it has allocations, none of them live, and its
trial or interactive task has reached a final state (a paused or preempted one has not); it
ended when its last allocation did.

Deleting: one short transaction per batch of :data:`BATCH` rows of one task (the index
``task_logs (task_id, id)`` finds them), with a pause between batches. Ingest inserts other
rows and takes no lock a delete holds, so it never waits for a cleanup; no transaction stays
open between batches (no WAL or vacuum held back by one long delete). The scheduled run is a
thread of the loop's leader (:func:`kick`); ``det task cleanup-logs`` runs the same thing in
its request. Each task whose logs a run deleted is recorded with the time
(``task_logs_deleted``), which the logs routes send as the ``X-Det-Logs-Deleted`` header.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from det.master import db, log_schedule, states
from det.master.db import Conn
from det.master.errors import Conflict, InvalidArgument, NotFound
from det.master.handles import MasterState

logger = logging.getLogger(__name__)

BATCH = 5000
PAUSE_SECONDS = 0.005
MAX_DAYS = 32767

#: How often (seconds) the loop's pass asks the database whether a scheduled run is due.
CHECK_SECONDS = 20.0

_lock = threading.Lock()
_thread: threading.Thread | None = None
_next_check = 0.0


def check_days(value: object) -> int:
    if isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not -1 <= value <= MAX_DAYS:
        raise InvalidArgument(
            f"numDays: must be -1 (forever) or between 0 and {MAX_DAYS} (got {value!r})"
        )
    return value


def set_for_trial(conn: Conn, trial_id: int, days: int) -> None:
    state = db.scalar(
        conn, str, "SELECT state FROM trials WHERE id = %s FOR NO KEY UPDATE", (trial_id,)
    )
    if state is None:
        raise NotFound(f"trial {trial_id} not found")
    if state not in states.TERMINAL:
        raise Conflict(f"trial {trial_id} is {state}; set its log retention once it ended")
    conn.execute("UPDATE trials SET log_retention_days = %s WHERE id = %s", (days, trial_id))


def set_for_experiment(conn: Conn, experiment_id: int, days: int) -> None:
    """Every trial of the ended experiment keeps its logs ``days`` days (-1: forever)."""
    state = db.scalar(
        conn,
        str,
        "SELECT state FROM experiments WHERE id = %s AND NOT deleted FOR NO KEY UPDATE",
        (experiment_id,),
    )
    if state is None:
        raise NotFound(f"experiment {experiment_id} not found")
    if state not in states.TERMINAL:
        raise Conflict(
            f"experiment {experiment_id} is {state}; set its log retention once it ended"
        )
    conn.execute(
        "UPDATE trials SET log_retention_days = %s WHERE experiment_id = %s", (days, experiment_id)
    )


def remaining(ended_at: dt.datetime | None, days: int, now: dt.datetime) -> int | None:
    """Whole days left before a task's logs expire (Determined's
    GetTrialRemainingLogRetentionDays): -1 when they are kept forever, None while the task has
    not ended, else the whole days of ``ended_at + days - now``, 0 once that has passed."""
    if days < 0:
        return -1
    if ended_at is None:
        return None
    left = ended_at + dt.timedelta(days=days) - now
    return max(left.days, 0)


@dataclass(frozen=True, slots=True)
class _Retained:
    """What a trial's remaining log retention depends on (:func:`remaining_for_trial`)."""

    log_retention_days: int | None
    state: str
    ended_at: dt.datetime | None


def remaining_for_trial(
    conn: Conn, trial_id: int, default_days: int, now: dt.datetime
) -> int | None:
    """:func:`remaining` for a trial: its own ``log_retention_days``, else ``default_days``;
    it ended when its last allocation did, once it is in a final state (as
    :func:`expired_tasks` counts it). NotFound when there is no such trial."""
    row = db.fetch_row(
        conn,
        _Retained,
        "SELECT t.log_retention_days, t.state,"
        " (SELECT CASE WHEN bool_and(a.state = 'TERMINATED') THEN max(a.ended_at) END"
        "  FROM allocations a WHERE a.task_id = t.task_id) AS ended_at"
        " FROM trials t WHERE t.id = %s",
        (trial_id,),
    )
    if row is None:
        raise NotFound(f"trial {trial_id} not found")
    days = row.log_retention_days
    ended = row.ended_at if row.state in states.TERMINAL else None
    return remaining(ended, default_days if days is None else int(days), now)


def expired_tasks(conn: Conn, default_days: int, now: dt.datetime) -> list[str]:
    """The tasks whose logs have expired at ``now`` and that still have logs."""
    return db.column(
        conn,
        str,
        "SELECT a.task_id FROM allocations a"
        " LEFT JOIN trials t ON t.task_id = a.task_id"
        " LEFT JOIN ntsc_tasks n ON n.id = a.task_id"
        " GROUP BY a.task_id, t.state, t.log_retention_days, n.state"
        " HAVING bool_and(a.state = 'TERMINATED')"
        f"  AND (t.state IS NULL OR t.state IN {states.TERMINAL_SQL})"
        "  AND (n.state IS NULL OR n.state = 'TERMINATED')"
        "  AND coalesce(t.log_retention_days, %(days)s) >= 0"
        "  AND max(a.ended_at) < %(now)s::timestamptz"
        "   - make_interval(days => coalesce(t.log_retention_days, %(days)s))"
        "  AND EXISTS (SELECT 1 FROM task_logs l WHERE l.task_id = a.task_id)",
        {"days": default_days, "now": now},
    )


def delete_logs(
    connect: Callable[[], AbstractContextManager[Conn]],
    tasks: list[str],
    *,
    batch: int = BATCH,
    pause: float = PAUSE_SECONDS,
    now: dt.datetime | None = None,
) -> int:
    """Deletes the tasks' logs, one short transaction per batch; returns how many rows. The
    last batch of a task records that retention deleted its logs, and when (``now``)."""
    now = now or dt.datetime.now(dt.UTC)
    removed = 0
    for task_id in tasks:
        while True:
            with connect() as conn:
                n = conn.execute(
                    "DELETE FROM task_logs WHERE id IN (SELECT id FROM task_logs"
                    " WHERE task_id = %s ORDER BY id LIMIT %s)",
                    (task_id, batch),
                ).rowcount
                if n < batch:
                    conn.execute(
                        "INSERT INTO task_logs_deleted (task_id, deleted_at) VALUES (%s, %s)"
                        " ON CONFLICT (task_id) DO UPDATE SET deleted_at = EXCLUDED.deleted_at",
                        (task_id, now),
                    )
            removed += n
            if n < batch:
                break
            time.sleep(pause)
    return removed


def deleted_at(conn: Conn, task_id: str) -> dt.datetime | None:
    """When retention deleted the task's logs (None: it never did)."""
    return db.scalar(
        conn, dt.datetime, "SELECT deleted_at FROM task_logs_deleted WHERE task_id = %s", (task_id,)
    )


def cleanup(st: MasterState, now: dt.datetime | None = None) -> int:
    """Deletes every expired task's logs now; returns how many rows."""
    now = now or dt.datetime.now(dt.UTC)
    with st.pool.connection() as conn:
        tasks = expired_tasks(conn, st.config.retention_policy.log_retention_days, now)
    removed = delete_logs(st.pool.connection, tasks, now=now)
    if tasks:
        logger.info("log retention: deleted %d log lines of %d tasks", removed, len(tasks))
    return removed


def _claim_run(st: MasterState, now: dt.datetime) -> bool:
    """Whether a scheduled run is due, marking it started (so it runs once)."""
    schedule = log_schedule.parse(st.config.retention_policy.schedule)
    with st.pool.connection() as conn:
        last_run = db.scalar(
            conn, dt.datetime, "SELECT last_run_at FROM log_retention_runs WHERE id = 1 FOR UPDATE"
        )
        if not log_schedule.due(schedule, now, last_run):
            return False
        conn.execute(
            "INSERT INTO log_retention_runs (id, last_run_at) VALUES (1, %s)"
            " ON CONFLICT (id) DO UPDATE SET last_run_at = EXCLUDED.last_run_at",
            (now,),
        )
    return True


def _run(st: MasterState) -> None:
    try:
        cleanup(st)
    except Exception:
        logger.exception("log retention cleanup failed; the next scheduled run tries again")


def kick(st: MasterState, now: dt.datetime | None = None) -> None:
    """The loop's pass: starts a cleanup thread when a scheduled run is due and none runs."""
    global _thread, _next_check
    with _lock:
        if _thread is not None and _thread.is_alive():
            return
        if now is None:
            if time.monotonic() < _next_check:
                return
            _next_check = time.monotonic() + CHECK_SECONDS
        if not _claim_run(st, now or dt.datetime.now(dt.UTC)):
            return
        _thread = threading.Thread(target=_run, args=(st,), name="log-retention", daemon=True)
        _thread.start()
