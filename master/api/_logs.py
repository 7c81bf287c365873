"""Task log streams: NDJSON ``{"result": …}`` lines, optionally following until the task ends."""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

from flask import Response, request, stream_with_context

from det.master.api._common import db, int_arg, release_connection
from det.master.errors import InvalidArgument
from det.master.wire import ts

_LEVELS = {
    "debug": "LOG_LEVEL_DEBUG",
    "info": "LOG_LEVEL_INFO",
    "warning": "LOG_LEVEL_WARNING",
    "error": "LOG_LEVEL_ERROR",
    "critical": "LOG_LEVEL_CRITICAL",
}


def _entry(r: dict[str, Any], trial_id: int | None) -> dict[str, Any]:
    level = r["level"] or "LOG_LEVEL_INFO"
    level = _LEVELS.get(level.lower(), level)
    out: dict[str, Any] = {
        "id": str(r["id"]),
        "taskId": r["task_id"],
        "allocationId": r["allocation_id"],
        "agentId": r["agent_id"],
        "containerId": r["container_id"],
        "rankId": r["rank_id"],
        "timestamp": ts(r["timestamp"]),
        "level": level,
        "log": r["log"],
        "message": r["log"],
        "source": r["source"],
        "stdtype": r["stdtype"],
    }
    if trial_id is not None:
        out["trialId"] = trial_id
    return out


def _task_done(conn: Any, task_id: str) -> bool:
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE state <> 'TERMINATED') AS live,"
        " (SELECT state FROM trials WHERE task_id = %s) AS trial_state FROM allocations WHERE task_id = %s",
        (task_id, task_id),
    ).fetchone()
    if row is None:
        return True
    return row["live"] == 0 and row["trial_state"] in ("COMPLETED", "CANCELED", "ERROR", None)


_LEVEL_NAMES = (
    "LOG_LEVEL_UNSPECIFIED",
    "LOG_LEVEL_TRACE",
    "LOG_LEVEL_DEBUG",
    "LOG_LEVEL_INFO",
    "LOG_LEVEL_WARNING",
    "LOG_LEVEL_ERROR",
    "LOG_LEVEL_CRITICAL",
)
_ORDERS = ("ORDER_BY_UNSPECIFIED", "ORDER_BY_ASC", "ORDER_BY_DESC")


def _timestamp(name: str) -> dt.datetime | None:
    raw = request.args.get(name)
    if not raw:
        return None
    try:
        value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(
            f"{name}: not an RFC 3339 time: {raw!r} (e.g. 2021-10-26T23:17:12Z)"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _filters() -> tuple[str, list[Any]]:
    """The request's filters (Determined's TaskLogs/TrialLogs fields) as SQL and parameters."""
    clauses: list[str] = []
    params: list[Any] = []
    levels = request.args.getlist("levels")
    for level in levels:
        if level not in _LEVEL_NAMES:
            raise InvalidArgument(
                f"levels: unknown level {level!r} (one of {', '.join(_LEVEL_NAMES)})"
            )
    if levels:
        # Stored levels are either Determined's names or Python's ("info"); none means INFO.
        raw = levels + [lv.removeprefix("LOG_LEVEL_").lower() for lv in levels]
        clause = "level = ANY(%s)"
        if "LOG_LEVEL_INFO" in levels:
            clause = "(level IS NULL OR level = ANY(%s))"
        clauses.append(clause)
        params.append(raw)
    for arg, column in (
        ("agentIds", "agent_id"),
        ("containerIds", "container_id"),
        ("allocationIds", "allocation_id"),
        ("sources", "source"),
        ("stdtypes", "stdtype"),
    ):
        values = request.args.getlist(arg)
        if values:
            clauses.append(f"{column} = ANY(%s)")
            params.append(values)
    ranks = request.args.getlist("rankIds")
    if ranks:
        try:
            params.append([int(r) for r in ranks])
        except ValueError:
            raise InvalidArgument(f"rankIds: must be integers (got {ranks})") from None
        clauses.append("rank_id = ANY(%s)")
    after, before = _timestamp("timestampAfter"), _timestamp("timestampBefore")
    if after is not None:
        clauses.append("timestamp > %s")
        params.append(after)
    if before is not None:
        clauses.append("timestamp < %s")
        params.append(before)
    text = request.args.get("searchText")
    if text:
        if request.args.get("enableRegex", "false").lower() == "true":
            clauses.append("log ~ %s")
        else:
            clauses.append("strpos(log, %s) > 0")
        params.append(text)
    return "".join(" AND " + c for c in clauses), params


def stream(task_id: str, trial_id: int | None = None) -> Response:
    """Log lines of a task as Determined sends them: oldest first, the first ``limit`` of them;
    ``orderBy=ORDER_BY_DESC`` gives the newest first (how its client asks for a tail, which it
    then reverses). ``follow`` keeps streaming new lines until the task ends."""
    follow = request.args.get("follow", "false").lower() == "true"
    limit = int_arg("limit", 0) or 0
    if limit < 0:
        raise InvalidArgument(f"limit: must not be negative (got {limit})")
    order = request.args.get("orderBy") or "ORDER_BY_UNSPECIFIED"
    if order not in _ORDERS:
        raise InvalidArgument(f"orderBy: unknown value {order!r} (ORDER_BY_ASC or ORDER_BY_DESC)")
    newest_first = order == "ORDER_BY_DESC"
    where, params = _filters()

    def gen() -> Any:
        last_id = 0
        sql = "SELECT * FROM task_logs WHERE task_id = %s" + where
        sql += " ORDER BY id DESC" if newest_first else " ORDER BY id"
        with db() as conn:
            rows = conn.execute(
                sql + (" LIMIT %s" if limit else ""),
                [task_id, *params, *([limit] if limit else [])],
            ).fetchall()
        for r in rows:
            last_id = max(last_id, r["id"])
            yield json.dumps({"result": _entry(r, trial_id)}) + "\n"
        if limit and len(rows) >= limit:
            return
        sent = len(rows)
        while follow:
            with db() as conn:
                rows = conn.execute(
                    "SELECT * FROM task_logs WHERE task_id = %s AND id > %s"
                    + where
                    + " ORDER BY id LIMIT 1000",
                    [task_id, last_id, *params],
                ).fetchall()
                done = not rows and _task_done(conn, task_id)
            for r in rows:
                last_id = r["id"]
                yield json.dumps({"result": _entry(r, trial_id)}) + "\n"
                sent += 1
                if limit and sent >= limit:
                    return
            if done:
                return
            if not rows:
                release_connection()  # no pooled connection is held while waiting
                time.sleep(0.5)

    return Response(stream_with_context(gen()), mimetype="application/x-ndjson")
