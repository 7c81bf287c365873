"""Task log streams: NDJSON ``{"result": …}`` lines, optionally following until the task ends."""

from __future__ import annotations

import json
import time
from typing import Any

from flask import Response, request, stream_with_context

from det.master.api._common import db, int_arg, release_connection
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


def stream(task_id: str, trial_id: int | None = None) -> Response:
    follow = request.args.get("follow", "false").lower() == "true"
    limit = int_arg("limit", 0) or 0
    # ``tail``-style: a positive limit without follow means the last N lines.
    tail = limit > 0 and request.args.get("orderBy") != "ORDER_BY_ASC"

    def gen() -> Any:
        last_id = 0
        with db() as conn:
            if tail:
                rows = conn.execute(
                    "SELECT * FROM (SELECT * FROM task_logs WHERE task_id = %s ORDER BY id DESC LIMIT %s) x ORDER BY id",
                    (task_id, limit),
                ).fetchall()
            else:
                rows = conn.execute(
                    "SELECT * FROM task_logs WHERE task_id = %s ORDER BY id"
                    + (" LIMIT %s" if limit else ""),
                    (task_id, limit) if limit else (task_id,),
                ).fetchall()
        for r in rows:
            last_id = r["id"]
            yield json.dumps({"result": _entry(r, trial_id)}) + "\n"
        while follow:
            with db() as conn:
                rows = conn.execute(
                    "SELECT * FROM task_logs WHERE task_id = %s AND id > %s ORDER BY id LIMIT 1000",
                    (task_id, last_id),
                ).fetchall()
                done = not rows and _task_done(conn, task_id)
            for r in rows:
                last_id = r["id"]
                yield json.dumps({"result": _entry(r, trial_id)}) + "\n"
            if done:
                return
            if not rows:
                release_connection()  # no pooled connection is held while waiting
                time.sleep(0.5)

    return Response(stream_with_context(gen()), mimetype="application/x-ndjson")
