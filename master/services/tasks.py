"""Determined's task list: the live allocations (trials, checkpoint-GC and interactive tasks) with
where they run, as ``GetTasks`` answers (``det task list``, ``det slot list``, ``det agent disable --drain``)."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import Any

from det.master import db, states
from det.master.db import Conn
from det.master.errors import NotFound, PermissionDenied
from det.master.handles import MasterState
from det.master.rows.tasks import AllocationSummaryRow, TaskAllocation
from det.master.schemas import d
from det.master.schemas.notebooks import task
from det.master.schemas.tasks import allocation_summary
from det.master.services import agents, allocations, ntsc, task_services


@dataclass(frozen=True, slots=True)
class _Context:
    context: bytes | None


@dataclass(frozen=True, slots=True)
class _Owner:
    owner_id: int
    username: str


@dataclass(frozen=True, slots=True)
class _TaskHead:
    """What ``GetTask`` shows of a task beside its allocations (:func:`task_view`)."""

    kind: str
    created_at: dt.datetime
    ended_at: dt.datetime | None
    #: Whether its service is up (an interactive task's proxy address is known).
    ready: bool


@dataclass(frozen=True, slots=True)
class _Live:
    """A live allocation of a task being killed (:func:`kill`)."""

    id: str
    state: str


def live_allocations(conn: Conn) -> dict[str, d.v1AllocationSummary]:
    """``allocationIdToSummary``: every allocation that has not terminated, by id."""
    rows = db.fetch_rows(
        conn,
        AllocationSummaryRow,
        "SELECT a.id, a.task_id, a.resource_pool, a.slots_needed, a.placement, a.container_id,"
        " a.created_at, a.started_at, a.trial_id, t.experiment_id,"
        " g.experiment_id AS gc_experiment_id, n.description AS ntsc_description, j.priority"
        " FROM allocations a LEFT JOIN trials t ON t.id = a.trial_id"
        " LEFT JOIN checkpoint_gc g ON g.allocation_id = a.id"
        " LEFT JOIN ntsc_tasks n ON n.id = a.task_id"
        " LEFT JOIN jobs j ON j.id = a.job_id"
        " WHERE a.state <> 'TERMINATED' ORDER BY a.created_at, a.id",
    )
    slots = agents.slot_devices(conn)
    return {r.id: allocation_summary(r, slots) for r in rows}


def context(conn: Conn, task_id: str) -> bytes:
    """The files a task starts with (a gzip tar): a trial's experiment's context, else the
    interactive task's (:func:`ntsc_context`)."""
    row = db.fetch_row(
        conn,
        _Context,
        "SELECT e.context FROM trials t JOIN experiments e ON e.id = t.experiment_id WHERE t.task_id = %s",
        (task_id,),
    )
    if row is None:
        return ntsc_context(conn, task_id)
    return bytes(row.context or b"")


def ntsc_context(conn: Conn, task_id: str) -> bytes:
    """An interactive task's context directory (empty when it has none); NotFound if no task."""
    return ntsc.context(conn, task_id) or b""


def task_view(conn: Conn, task_id: str) -> d.v1Task:
    """Determined's ``GetTask``: a trial's, a checkpoint GC's or an interactive task's task."""
    allocs = db.fetch_rows(
        conn,
        TaskAllocation,
        "SELECT id, slots_needed, state, created_at, started_at, ended_at, exit_reason"
        " FROM allocations WHERE task_id = %s ORDER BY created_at DESC, id DESC",
        (task_id,),
    )
    row = db.fetch_row(
        conn,
        _TaskHead,
        "SELECT kind, created_at, ended_at, proxy_address IS NOT NULL AS ready FROM ntsc_tasks"
        " WHERE id = %s",
        (task_id,),
    )
    if row is None:
        row = db.fetch_row(
            conn,
            _TaskHead,
            "SELECT 'TRIAL' AS kind, created_at, ended_at, false AS ready FROM trials"
            " WHERE task_id = %s",
            (task_id,),
        )
    if row is None and allocs:
        last = allocs[0]
        live = last.state != "TERMINATED"
        row = _TaskHead(
            kind="CHECKPOINT_GC",
            created_at=allocs[-1].created_at,
            ended_at=None if live else last.ended_at,
            ready=False,
        )
    if row is None:
        raise NotFound(f"task {task_id} not found")
    ready = row.ready or row.kind == "TRIAL"
    return task(task_id, row.kind, row.created_at, row.ended_at, allocs, ready)


def proxy_ticket(conn: Conn, st: MasterState, task_id: str, user: Any, session_id: int) -> str:
    """A one-minute, single-use ticket to task ``task_id``'s proxied page for ``user`` (its
    owner or an admin: the proxy checks again when it is used), bound to the session it was
    asked with (the cookie it becomes dies with that session)."""
    row = db.fetch_row(
        conn,
        _Owner,
        "SELECT n.owner_id, u.username FROM ntsc_tasks n JOIN users u ON u.id = n.owner_id"
        " WHERE n.id = %s",
        (task_id,),
    )
    if row is None:
        raise NotFound(f"task {task_id} not found")
    if not user.admin and user.id != row.owner_id:
        raise PermissionDenied(
            f"task {task_id} belongs to {row.username}; only its owner or an admin may open it"
        )
    return task_services.new_ticket(st, task_id, user.id, session_id, time.time())


def kill(conn: Conn, task_id: str, reason: str = "killed") -> None:
    """Asks an interactive task's live allocation to stop (its container gets SIGTERM, then
    SIGKILL); a queued one ends at once. Killing an ended task changes nothing. Here, above
    ``ntsc`` and ``allocations``: a queued allocation's end goes through ``allocations``, which
    hands a task's end to ``ntsc``.

    Locks allocations before the task row, as an allocation's end does (lock order)."""
    state = db.scalar(conn, str, "SELECT state FROM ntsc_tasks WHERE id = %s", (task_id,))
    if state is None:
        raise NotFound(f"task {task_id} not found")
    if state == states.TERMINATED:
        return
    live = db.fetch_rows(
        conn,
        _Live,
        "UPDATE allocations SET kill_requested = true, exit_reason = coalesce(exit_reason, %s)"
        " WHERE task_id = %s AND state <> 'TERMINATED' RETURNING id, state",
        (reason, task_id),
    )
    conn.execute(
        "UPDATE ntsc_tasks SET exit_status = coalesce(exit_status, %s) WHERE id = %s",
        (reason, task_id),
    )
    for a in live:
        if a.state == states.PENDING:
            allocations.on_terminated(conn, a.id, None, reason)
    if not live:
        ntsc.finish(conn, task_id, None, reason)
    conn.execute("NOTIFY det_wakeup")
