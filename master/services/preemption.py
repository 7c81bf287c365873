"""An allocation's preemption signal as its task sees it: whether it is asked to checkpoint and
exit, the task's acknowledgement, and a preemption the task learnt of from its host."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg.rows import class_row

from det.master import states
from det.master.db import Conn


@dataclass(frozen=True, slots=True)
class Signal:
    preempt_requested: bool
    state: str


def signal(conn: Conn, allocation_id: str) -> Signal | None:
    """``preempt_requested`` and ``state`` of the allocation, None if there is none."""
    cur = conn.cursor(row_factory=class_row(Signal))
    return cur.execute(
        "SELECT preempt_requested, state FROM allocations WHERE id = %s", (allocation_id,)
    ).fetchone()


def acknowledge(conn: Conn, allocation_id: str) -> None:
    """The task has seen the signal and is checkpointing."""
    conn.execute("UPDATE allocations SET preempt_acked = true WHERE id = %s", (allocation_id,))


def report_pending(conn: Conn, allocation_id: str) -> None:
    """The task learnt (from its host's scheduler) that it is about to be preempted: it is asked
    to checkpoint and exit, as after a preemption by det's own scheduler (once; an ended
    allocation is left alone)."""
    row = conn.execute(
        "UPDATE allocations SET preempt_requested = true,"
        " exit_reason = coalesce(exit_reason, 'preempted: pending preemption reported by the task')"
        " WHERE id = %s AND state <> 'TERMINATED' AND NOT preempt_requested RETURNING id",
        (allocation_id,),
    ).fetchone()
    if row is not None:
        states.record_event(
            conn, "allocation", allocation_id, "preempt", "pending preemption reported"
        )
