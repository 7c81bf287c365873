"""Task log streams: NDJSON ``{"result": …}`` lines, optionally following until the task ends.

A task whose logs retention deleted says so in the ``X-Det-Logs-Deleted`` header (the RFC 3339
time of the deletion): a header, because Determined's client reads only the body's lines (its
bindings never look at a logs answer's headers), and the stream may have no line to carry it.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator

from flask import Response, stream_with_context

from det.master.api._common import db, release_connection, state
from det.master.api._contract import query_dict
from det.master.errors import InvalidArgument
from det.master.rows.logs import LogLine
from det.master.schemas import d, validate
from det.master.schemas import logs as wire
from det.master.services import log_retention, task_logs
from det.master.services.task_logs import LogsParams
from det.master.wire import Paging

DELETED_HEADER = "X-Det-Logs-Deleted"


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
    limit = Paging.of({"limit": params.get("limit")}).limit
    if limit < 0:
        raise InvalidArgument(f"query.limit: must not be negative (got {limit})")
    newest_first = params.get("orderBy") == "ORDER_BY_DESC"
    where, values = task_logs.filters(params)

    def line(r: LogLine) -> str:
        entry = wire.task_log(r) if trial_id is None else wire.trial_log(r, trial_id)
        return json.dumps({"result": entry}) + "\n"

    # The first page is read before the response starts, so a filter the database refuses (a
    # bad regular expression, a rank beyond its column) is a 400, not a broken stream.
    with db() as conn:
        first = task_logs.first_page(conn, task_id, where, values, limit, newest_first)
        deleted = log_retention.deleted_at(conn, task_id)
        # Its agents ship what the task prints at once while someone reads it (a reader that
        # comes back within the watch sees lines a quarter of a second old, not seconds).
        task_logs.watch(conn, task_id)
    watched = time.monotonic()

    budget = state().config.long_request_seconds()
    deadline = None if budget is None else time.monotonic() + budget

    def gen() -> Iterator[str]:
        nonlocal watched
        last_id = 0
        rows = first
        for r in rows:
            last_id = max(last_id, r.id)
            yield line(r)
        if limit and len(rows) >= limit:
            return
        sent = len(rows)
        while follow:
            with db() as conn:
                rows = task_logs.lines_after(conn, task_id, last_id, where, values)
                done = not rows and task_logs.task_done(conn, task_id)
                if not done and time.monotonic() - watched >= task_logs.WATCH_RENEW_SECONDS:
                    task_logs.watch(conn, task_id)  # a new allocation of the task too
                    watched = time.monotonic()
            for r in rows:
                last_id = r.id
                yield line(r)
                sent += 1
                if limit and sent >= limit:
                    return
            if done or (deadline is not None and time.monotonic() >= deadline):
                return
            if not rows:
                release_connection()  # no pooled connection is held while waiting
                time.sleep(0.5)

    headers = {}
    if deleted is not None:
        headers[DELETED_HEADER] = deleted.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    return Response(stream_with_context(gen()), mimetype="application/x-ndjson", headers=headers)
