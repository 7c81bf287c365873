"""Task log streams: NDJSON ``{"result": …}`` lines, optionally following until the task ends."""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any, cast

from flask import Response, stream_with_context

from det.master.api._common import db, release_connection
from det.master.api._contract import query_dict
from det.master.errors import InvalidArgument
from det.master.schemas import d, validate
from det.master.schemas import logs as wire

LogsParams = d.TaskLogsParams | d.TrialLogsParams


def _task_done(conn: Any, task_id: str) -> bool:
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE state <> 'TERMINATED') AS live,"
        " (SELECT state FROM trials WHERE task_id = %s) AS trial_state,"
        " (SELECT state FROM ntsc_tasks WHERE id = %s) AS ntsc_state"
        " FROM allocations WHERE task_id = %s",
        (task_id, task_id, task_id),
    ).fetchone()
    if row is None:
        return True
    # A preempted trial or interactive task is between allocations, not done.
    return (
        row["live"] == 0
        and row["trial_state"] in ("COMPLETED", "CANCELED", "ERROR", None)
        and row["ntsc_state"] in ("TERMINATED", None)
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


def _filters(params: LogsParams) -> tuple[str, list[Any]]:
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
    given_params = cast("dict[str, Any]", params)  # allocationIds: TaskLogs' only
    wanted: dict[str, list[str] | None] = {
        "agent_id": params.get("agentIds"),
        "container_id": params.get("containerIds"),
        "allocation_id": given_params.get("allocationIds"),
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


def stream(
    task_id: str, params: LogsParams | None = None, *, trial_id: int | None = None
) -> Response:
    """Log lines of a task as Determined sends them: oldest first, the first ``limit`` of them;
    ``orderBy=ORDER_BY_DESC`` gives the newest first (how its client asks for a tail, which it
    then reverses). ``follow`` keeps streaming new lines until the task ends. ``params`` are the
    route's validated query (None: the request's, checked as ``TaskLogs``'); a trial's lines
    are ``v1TrialLogsResponse`` (``trial_id``), a task's ``v1TaskLogsResponse``."""
    if params is None:
        params = validate(d.TaskLogsParams, query_dict(d.TaskLogsParams), "query")
    follow = bool(params.get("follow"))
    limit = params.get("limit") or 0
    if limit < 0:
        raise InvalidArgument(f"query.limit: must not be negative (got {limit})")
    newest_first = params.get("orderBy") == "ORDER_BY_DESC"
    where, values = _filters(params)

    def line(r: dict[str, Any]) -> str:
        entry = wire.task_log(r) if trial_id is None else wire.trial_log(r, trial_id)
        return json.dumps({"result": entry}) + "\n"

    # The first page is read before the response starts, so a filter the database refuses (a
    # bad regular expression, a rank beyond its column) is a 400, not a broken stream.
    sql = "SELECT * FROM task_logs WHERE task_id = %s" + where
    sql += " ORDER BY id DESC" if newest_first else " ORDER BY id"
    with db() as conn:
        first = conn.execute(
            sql + (" LIMIT %s" if limit else ""),
            [task_id, *values, *([limit] if limit else [])],
        ).fetchall()

    def gen() -> Any:
        last_id = 0
        rows = first
        for r in rows:
            last_id = max(last_id, r["id"])
            yield line(r)
        if limit and len(rows) >= limit:
            return
        sent = len(rows)
        while follow:
            with db() as conn:
                rows = conn.execute(
                    "SELECT * FROM task_logs WHERE task_id = %s AND id > %s"
                    + where
                    + " ORDER BY id LIMIT 1000",
                    [task_id, last_id, *values],
                ).fetchall()
                done = not rows and _task_done(conn, task_id)
            for r in rows:
                last_id = r["id"]
                yield line(r)
                sent += 1
                if limit and sent >= limit:
                    return
            if done:
                return
            if not rows:
                release_connection()  # no pooled connection is held while waiting
                time.sleep(0.5)

    return Response(stream_with_context(gen()), mimetype="application/x-ndjson")
