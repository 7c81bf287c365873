"""The ``allocations`` table: its row, typed (:class:`Allocation`), and the one function that
queues an allocation (:func:`queue`, the one ``INSERT INTO allocations``) for every task kind.

Each kind's module (``trial_runs``, ``ntsc``, ``checkpoint_gc``) decides when a run is due and
what its id, job, pool and slots are; :func:`queue` writes the row, PENDING, with its kind (the
key :mod:`det.master.services.task_kinds` dispatches on) and the digest of its task's token.
This module imports none of the kinds, so each of them can call it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

from psycopg.rows import class_row

from det.master import states
from det.master.db import Conn
from det.master.handles import MasterState
from det.master.services import containers
from det.master.services.users import token_digest

#: ``allocations.kind``: the task types the API reports (v1TaskType without its prefix). The
#: column's CHECK lists the same names (migration 0037), and ``task_kinds.KINDS`` has a module
#: for each (tests/integration/test_task_kinds.py holds the three together).
Kind = Literal["TRIAL", "COMMAND", "NOTEBOOK", "SHELL", "TENSORBOARD", "CHECKPOINT_GC"]


@dataclass(frozen=True, slots=True)
class Allocation:
    """An allocation as the kinds read it (the columns they need; the table has more)."""

    id: str
    kind: Kind
    task_id: str
    #: The trial it runs (``TRIAL`` only).
    trial_id: int | None
    job_id: str
    resource_pool: str
    slots_needed: int
    state: str
    #: ``{agent id: [slot ids]}`` once placed.
    placement: dict[str, list[str]] | None
    preempt_requested: bool
    kill_requested: bool
    container_id: str | None
    exit_code: int | None
    exit_reason: str | None
    created_at: dt.datetime
    #: DET_UNIQUE_PORT_OFFSET, chosen at the first container spec (None until then).
    port_offset: int | None = None
    #: Someone reads its logs now (``task_logs.watch``): its agent ships them at once.
    logs_watched: bool = False


# Allocation's fields, in order (class_row refuses a row whose columns are not exactly them).
_COLUMNS = (
    "id, kind, task_id, trial_id, job_id, resource_pool, slots_needed, state, placement,"
    " preempt_requested, kill_requested, container_id, exit_code, exit_reason, created_at,"
    " port_offset, coalesce(logs_watched_until > now(), false) AS logs_watched"
)


def get(conn: Conn, allocation_id: str, *, lock: bool = False) -> Allocation | None:
    """Allocation ``allocation_id``; ``lock``: ``FOR NO KEY UPDATE`` (an ending allocation)."""
    cur = conn.cursor(row_factory=class_row(Allocation))
    return cur.execute(
        "SELECT "
        + _COLUMNS
        + " FROM allocations WHERE id = %s"
        + (" FOR NO KEY UPDATE" if lock else ""),
        (allocation_id,),
    ).fetchone()


# Live on an agent (its id the one parameter): placed on it and not ended. The state is a literal
# so that the partial index allocations_live_placement (migration 0046) serves it;
# :func:`is_live_on` is the same test for a row in hand.
_LIVE_ON = "(placement ? %s AND state <> 'TERMINATED')"


def live_on(conn: Conn, agent_id: str) -> list[Allocation]:
    """The allocations placed on ``agent_id`` that have not ended, by id."""
    cur = conn.cursor(row_factory=class_row(Allocation))
    return cur.execute(
        "SELECT " + _COLUMNS + " FROM allocations WHERE " + _LIVE_ON + " ORDER BY id",
        (agent_id,),
    ).fetchall()


# :func:`live_on_or_among`'s rows (unordered; parameters: the agent's id, the ids), also read
# in the same statement as a quiet heartbeat's update (det.master.services.agents).
LIVE_ON_OR_AMONG = "SELECT " + _COLUMNS + " FROM allocations WHERE " + _LIVE_ON + " OR id = ANY(%s)"


def live_on_or_among(conn: Conn, agent_id: str, ids: list[str]) -> list[Allocation]:
    """In one read, by id: the allocations placed on ``agent_id`` that have not ended (what
    :func:`live_on` reads) and those of ``ids`` (an agent's reported containers), whatever their
    state or placement. :func:`is_live_on` tells the first from the rest."""
    cur = conn.cursor(row_factory=class_row(Allocation))
    return cur.execute(LIVE_ON_OR_AMONG + " ORDER BY id", (agent_id, ids)).fetchall()


def is_live_on(alloc: Allocation, agent_id: str) -> bool:
    """``_LIVE_ON`` (what :func:`live_on` selects) for a row in hand (pure)."""
    return (
        alloc.state != states.TERMINATED
        and alloc.placement is not None
        and agent_id in alloc.placement
    )


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
