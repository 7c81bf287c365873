"""Determined's task list: the live allocations (trials, checkpoint-GC and interactive tasks) with
where they run, as ``GetTasks`` answers (``det task list``, ``det slot list``, ``det agent disable --drain``)."""

from __future__ import annotations

from det.master.db import Conn
from det.master.schemas import d
from det.master.schemas.tasks import allocation_summary
from det.master.services import ntsc


def live_allocations(conn: Conn) -> dict[str, d.v1AllocationSummary]:
    """``allocationIdToSummary``: every allocation that has not terminated, by id."""
    rows = conn.execute(
        "SELECT a.*, t.experiment_id, g.experiment_id AS gc_experiment_id, j.priority,"
        " n.kind AS ntsc_kind, n.description AS ntsc_description"
        " FROM allocations a LEFT JOIN trials t ON t.id = a.trial_id"
        " LEFT JOIN checkpoint_gc g ON g.allocation_id = a.id"
        " LEFT JOIN ntsc_tasks n ON n.id = a.task_id"
        " LEFT JOIN jobs j ON j.id = a.job_id"
        " WHERE a.state <> 'TERMINATED' ORDER BY a.created_at, a.id"
    ).fetchall()
    slots = {
        (s["agent_id"], s["slot_id"]): s
        for s in conn.execute("SELECT agent_id, slot_id, type, uuid, brand FROM slots")
    }
    return {r["id"]: allocation_summary(r, slots) for r in rows}


def ntsc_context(conn: Conn, task_id: str) -> bytes:
    """An interactive task's context directory (empty when it has none); NotFound if no task."""
    return ntsc.context(conn, task_id) or b""
