"""Queues an allocation: the one ``INSERT INTO allocations``, for every task kind.

Each kind's module (``trial_runs``, ``ntsc``, ``checkpoint_gc``) decides when a run is due and
what its id, job, pool and slots are; this writes the row, PENDING, with its kind (the key
:mod:`det.master.services.task_kinds` dispatches on) and the digest of its task's token. It
imports none of the kinds, so each of them can call it.
"""

from __future__ import annotations

from typing import Literal

from det.master import states
from det.master.db import Conn
from det.master.handles import MasterState
from det.master.services import containers
from det.master.services.users import token_digest

#: ``allocations.kind``: the task types the API reports (v1TaskType without its prefix). The
#: column's CHECK lists the same names (migration 0036), and ``task_kinds.KINDS`` has a module
#: for each (tests/integration/test_task_kinds.py holds the three together).
Kind = Literal["TRIAL", "COMMAND", "NOTEBOOK", "SHELL", "TENSORBOARD", "CHECKPOINT_GC"]


def queue(
    conn: Conn,
    st: MasterState,
    *,
    kind: Kind,
    allocation_id: str,
    task_id: str,
    job_id: str,
    resource_pool: str,
    slots: int,
    trial_id: int | None = None,
) -> bool:
    """Queues allocation ``allocation_id`` of ``kind``; False when it exists already (a run is
    queued once, whichever pass asks again)."""
    row = conn.execute(
        "INSERT INTO allocations (id, kind, task_id, trial_id, job_id, resource_pool,"
        " slots_needed, state, token_hash) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (id) DO NOTHING RETURNING id",
        (
            allocation_id,
            kind,
            task_id,
            trial_id,
            job_id,
            resource_pool,
            slots,
            states.PENDING,
            token_digest(containers.allocation_token(st, allocation_id)),
        ),
    ).fetchone()
    return row is not None
