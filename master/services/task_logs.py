"""Reads of task logs (``task_logs``): Determined's TaskLogs/TrialLogs filters as SQL, the first
page, the pages a follow reads after it, and whether a task has ended for good."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import orjson
from psycopg.rows import class_row

from det.master import db, states
from det.master.db import Conn
from det.master.errors import InvalidArgument
from det.master.rows.logs import LogLine
from det.master.schemas import d
from det.master.schemas import logs as wire
from det.master.services import webhooks

LogsParams = d.TaskLogsParams | d.TrialLogsParams


_COLUMNS = (
    "id, task_id, allocation_id, agent_id, container_id, rank_id, log, level, stdtype, source,"
    " timestamp"
)


# The rows travel as one JSON array of objects (orjson on the master, one C call; keys short)
# that the server unpacks: psycopg adapting ten arrays element by element in Python cost the
# master twice as much (a 2-line request 134 against 71 us of its CPU, 50 lines 877 against 394;
# the server's share the same). Columns in ``_KEYS``' order.
_INSERT = (
    "INSERT INTO task_logs (task_id, allocation_id, agent_id, container_id, rank_id, log,"
    " level, stdtype, source, timestamp)"
    " SELECT v.* FROM json_to_recordset(%s::text::json)"
    "  AS v(t text, a text, g text, c text, r int, l text, lv text, s text, src text, ts timestamptz)"
    " WHERE (v.c IS NULL OR NOT EXISTS (SELECT 1 FROM task_logs x"
    "  WHERE x.container_id = v.c AND x.timestamp = v.ts AND x.log = v.l))"
)
_KEYS = ("t", "a", "g", "c", "r", "l", "lv", "s", "src", "ts")


def _rows_json(rows: list[tuple[Any, ...]]) -> str:
    """The rows as ``_INSERT``'s parameter. A timestamp is encoded as RFC 3339 to the
    microsecond (with its offset; a naive one without, read in the session's time zone as
    PostgreSQL reads a ``timestamp`` parameter)."""
    return orjson.dumps([dict(zip(_KEYS, row, strict=True)) for row in rows]).decode()


def insert(conn: Conn, rows: list[tuple[Any, ...]]) -> None:
    """Stores log lines, each ``(task_id, allocation_id, agent_id, container_id, rank_id, log,
    level, stdtype, source, timestamp)``, in one statement, and queues the webhook events they
    fire, in the caller's transaction. A container line the master already holds (same
    container, Docker timestamp and text: an agent restarted between a post and saving its
    cursor ships it again) is skipped; repeats inside one batch are separate lines and all
    kept."""
    if not rows:
        return
    conn.execute(_INSERT, (_rows_json(rows),))
    webhooks.logs_arrived(conn, rows)


def insert_unless_hooked(conn: Conn, rows: list[tuple[Any, ...]]) -> bool:
    """Stores log lines as :func:`insert` does, in one statement on its own (atomic without a
    transaction: on a connection in autocommit, one round trip instead of four), unless a
    webhook trigger watches log lines: then it stores nothing and answers False, and the caller
    stores them with :func:`insert` in a transaction, where the lines and the events they fire
    commit together. True when the lines are stored (or there are none)."""
    if not rows:
        return True
    stored = db.scalar(
        conn,
        bool,
        f"WITH hooked(h) AS ({webhooks.ANY_LOG_TRIGGER}), inserted AS ({_INSERT}"
        " AND NOT (SELECT h FROM hooked) RETURNING 1)"
        " SELECT NOT h AS stored FROM hooked",
        (_rows_json(rows),),
    )
    return bool(stored)


def task_of_trial(conn: Conn, trial_id: int) -> str | None:
    """The task id of trial ``trial_id`` (its logs are its task's), None for no such trial."""
    return db.scalar(conn, str, "SELECT task_id FROM trials WHERE id = %s", (trial_id,))


@dataclass(frozen=True, slots=True)
class _Liveness:
    """A task's live allocations and its trial's or interactive task's state (:func:`task_done`)."""

    live: int
    trial_state: str | None
    ntsc_state: str | None


#: How long one read of a task's logs keeps its live allocations watched (its agents ship their
#: lines at once, not in batches seconds apart: det.agent.logs.LogShipper); a follow renews the
#: watch every ``WATCH_RENEW_SECONDS`` while it streams.
WATCH_SECONDS = 60
WATCH_RENEW_SECONDS = 20


def watch(conn: Conn, task_id: str) -> None:
    """Someone reads ``task_id``'s logs: its live allocations are watched for
    ``WATCH_SECONDS``. A watch that begins wakes their agents (migration 0049), whose next
    heartbeat answer says so; one with more than ``WATCH_SECONDS - WATCH_RENEW_SECONDS`` left
    is not written again (a busy log view costs no write a read)."""
    conn.execute(
        "UPDATE allocations SET logs_watched_until = now() + make_interval(secs => %s)"
        " WHERE task_id = %s AND state <> 'TERMINATED' AND (logs_watched_until IS NULL"
        "  OR logs_watched_until < now() + make_interval(secs => %s))",
        (WATCH_SECONDS, task_id, WATCH_SECONDS - WATCH_RENEW_SECONDS),
    )


def task_done(conn: Conn, task_id: str) -> bool:
    """The task has no live allocation and will get no other: a preempted trial or interactive
    task is between allocations, not done."""
    row = db.fetch_row(
        conn,
        _Liveness,
        "SELECT count(*) FILTER (WHERE state <> 'TERMINATED') AS live,"
        " (SELECT state FROM trials WHERE task_id = %s) AS trial_state,"
        " (SELECT state FROM ntsc_tasks WHERE id = %s) AS ntsc_state"
        " FROM allocations WHERE task_id = %s",
        (task_id, task_id, task_id),
    )
    if row is None:
        return True
    return (
        row.live == 0
        and (row.trial_state is None or row.trial_state in states.TERMINAL)
        and row.ntsc_state in (states.TERMINATED, None)
    )


def _timestamp(name: str, raw: str | None) -> dt.datetime | None:
    if not raw:
        return None
    try:
        value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(
            f"{name}: not an RFC 3339 time: {raw!r} (e.g. 2021-10-26T23:17:12Z)"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _stored_names(levels: list[d.v1LogLevel]) -> list[str]:
    """What a row stores for ``levels``: Determined's names or Python's (``info``, ``warn``)."""
    out: list[str] = list(levels)
    for name, lv in wire.PYTHON_LEVELS.items():
        if lv in levels:
            out.append(name)
    return out


def filters(params: LogsParams) -> tuple[str, list[Any]]:
    """The request's filters (Determined's TaskLogs/TrialLogs fields) as SQL and parameters."""
    clauses: list[str] = []
    values: list[Any] = []
    levels = params.get("levels") or []
    if levels:
        # A row with no level is INFO.
        clause = "level = ANY(%s)"
        if "LOG_LEVEL_INFO" in levels:
            clause = "(level IS NULL OR level = ANY(%s))"
        clauses.append(clause)
        values.append(_stored_names(levels))
    allocation_ids = dict(params).get("allocationIds")  # TaskLogs' only
    wanted: dict[str, list[str] | None] = {
        "agent_id": params.get("agentIds"),
        "container_id": params.get("containerIds"),
        "allocation_id": (
            [str(a) for a in allocation_ids] if isinstance(allocation_ids, list) else None
        ),
        "source": params.get("sources"),
        "stdtype": params.get("stdtypes"),
    }
    for column, given in wanted.items():
        if given:
            clauses.append(f"{column} = ANY(%s)")
            values.append(given)
    ranks = params.get("rankIds")
    if ranks:
        clauses.append("rank_id = ANY(%s)")
        values.append(list(ranks))
    after = _timestamp("timestampAfter", params.get("timestampAfter"))
    before = _timestamp("timestampBefore", params.get("timestampBefore"))
    if after is not None:
        clauses.append("timestamp > %s")
        values.append(after)
    if before is not None:
        clauses.append("timestamp < %s")
        values.append(before)
    text = params.get("searchText")
    if text:
        clauses.append("log ~ %s" if params.get("enableRegex") else "strpos(log, %s) > 0")
        values.append(text)
    return "".join(" AND " + c for c in clauses), values


def first_page(
    conn: Conn, task_id: str, where: str, values: list[Any], limit: int, newest_first: bool
) -> list[LogLine]:
    """The task's lines that pass ``where`` (from :func:`filters`), oldest first or newest
    first, the first ``limit`` of them (0: all)."""
    sql = f"SELECT {_COLUMNS} FROM task_logs WHERE task_id = %s" + where
    sql += " ORDER BY id DESC" if newest_first else " ORDER BY id"
    return (
        conn.cursor(row_factory=class_row(LogLine))
        .execute(
            sql + (" LIMIT %s" if limit else ""),
            [task_id, *values, *([limit] if limit else [])],
        )
        .fetchall()
    )


def lines_after(
    conn: Conn, task_id: str, last_id: int, where: str, values: list[Any]
) -> list[LogLine]:
    """Up to 1,000 of the task's lines after line ``last_id`` that pass ``where``."""
    return (
        conn.cursor(row_factory=class_row(LogLine))
        .execute(
            f"SELECT {_COLUMNS} FROM task_logs WHERE task_id = %s AND id > %s"
            + where
            + " ORDER BY id LIMIT 1000",
            [task_id, last_id, *values],
        )
        .fetchall()
    )
