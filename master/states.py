"""State machines of experiments, trials, allocations and interactive tasks, as tables, and the one function that
changes a ``state`` column (and records why).

Experiments and trials use Determined's states (sent on the wire as ``STATE_<NAME>``).
"""

from __future__ import annotations

import logging

from det.master.db import Conn
from det.master.errors import Conflict

logger = logging.getLogger(__name__)

ACTIVE = "ACTIVE"
PAUSED = "PAUSED"
STOPPING_CANCELED = "STOPPING_CANCELED"
STOPPING_KILLED = "STOPPING_KILLED"
STOPPING_COMPLETED = "STOPPING_COMPLETED"
STOPPING_ERROR = "STOPPING_ERROR"
COMPLETED = "COMPLETED"
CANCELED = "CANCELED"
ERROR = "ERROR"
DELETING = "DELETING"

TERMINAL = frozenset({COMPLETED, CANCELED, ERROR})
STOPPING = frozenset({STOPPING_CANCELED, STOPPING_KILLED, STOPPING_COMPLETED, STOPPING_ERROR})

EXPERIMENT_TRANSITIONS: dict[str, frozenset[str]] = {
    ACTIVE: frozenset(
        {PAUSED, STOPPING_CANCELED, STOPPING_KILLED, STOPPING_COMPLETED, STOPPING_ERROR}
    ),
    PAUSED: frozenset({ACTIVE, STOPPING_CANCELED, STOPPING_KILLED}),
    STOPPING_CANCELED: frozenset({CANCELED, STOPPING_KILLED}),
    STOPPING_COMPLETED: frozenset({COMPLETED, STOPPING_KILLED, STOPPING_ERROR}),
    STOPPING_ERROR: frozenset({ERROR, STOPPING_KILLED}),
    STOPPING_KILLED: frozenset({CANCELED}),
    COMPLETED: frozenset({DELETING}),
    CANCELED: frozenset({DELETING}),
    ERROR: frozenset({DELETING}),
    DELETING: frozenset(),
}

TRIAL_TRANSITIONS: dict[str, frozenset[str]] = {
    ACTIVE: frozenset(
        {
            PAUSED,
            STOPPING_CANCELED,
            STOPPING_KILLED,
            STOPPING_COMPLETED,
            STOPPING_ERROR,
            COMPLETED,
            CANCELED,
            ERROR,
        }
    ),
    PAUSED: frozenset({ACTIVE, STOPPING_CANCELED, STOPPING_KILLED, CANCELED}),
    STOPPING_CANCELED: frozenset({CANCELED, STOPPING_KILLED}),
    STOPPING_COMPLETED: frozenset({COMPLETED, STOPPING_KILLED, ERROR}),
    STOPPING_ERROR: frozenset({ERROR, STOPPING_KILLED}),
    STOPPING_KILLED: frozenset({CANCELED}),
    COMPLETED: frozenset(),
    CANCELED: frozenset(),
    ERROR: frozenset(),
}

# Allocation (one run of a trial on slots) states; containers report the middle ones.
PENDING = "PENDING"
ASSIGNED = "ASSIGNED"
PULLING = "PULLING"
STARTING = "STARTING"
RUNNING = "RUNNING"
TERMINATING = "TERMINATING"
TERMINATED = "TERMINATED"

ALLOCATION_ORDER = [PENDING, ASSIGNED, PULLING, STARTING, RUNNING, TERMINATING, TERMINATED]
ALLOCATION_TRANSITIONS: dict[str, frozenset[str]] = {
    s: frozenset(ALLOCATION_ORDER[i + 1 :]) for i, s in enumerate(ALLOCATION_ORDER)
}
LIVE_ALLOCATION = frozenset(ALLOCATION_ORDER[:-1])

# Interactive tasks (commands, notebooks, shells, TensorBoards): ACTIVE while they want to run
# (queued, running, or re-queued after a preemption), TERMINATED once they end for good. What the
# wire shows in between (QUEUED, PULLING, RUNNING…) is their live allocation's state.
TASK_TRANSITIONS: dict[str, frozenset[str]] = {
    ACTIVE: frozenset({TERMINATED}),
    TERMINATED: frozenset(),
}

_TABLES = {
    "experiment": ("experiments", EXPERIMENT_TRANSITIONS),
    "trial": ("trials", TRIAL_TRANSITIONS),
    "allocation": ("allocations", ALLOCATION_TRANSITIONS),
    "task": ("ntsc_tasks", TASK_TRANSITIONS),
}


def can_transition(entity: str, current: str, new: str) -> bool:
    return new in _TABLES[entity][1].get(current, frozenset())


def transition(
    conn: Conn, entity: str, entity_id: int | str, new: str, reason: str, *, strict: bool = True
) -> bool:
    """Moves ``entity`` to ``new`` if the table allows it from its current state.

    Returns whether it moved. With ``strict``, a forbidden move raises Conflict (for user
    actions); control loops pass ``strict=False`` and simply skip stale moves.
    """
    table, rules = _TABLES[entity]
    row = conn.execute(
        f"SELECT state FROM {table} WHERE id = %s FOR NO KEY UPDATE", (entity_id,)
    ).fetchone()
    if row is None:
        return False
    current = row["state"]
    if current == new:
        return False
    if new not in rules.get(current, frozenset()):
        if strict:
            raise Conflict(f"{entity} {entity_id} is {current}; it cannot become {new}")
        return False
    extra = ""
    if entity in ("experiment", "trial") and new in TERMINAL:
        extra = ", ended_at = now()"
    if entity in ("allocation", "task") and new == TERMINATED:
        extra = ", ended_at = now()"
    if entity == "allocation" and new == RUNNING:
        extra = ", started_at = coalesce(started_at, now())"
    conn.execute(f"UPDATE {table} SET state = %s{extra} WHERE id = %s", (new, entity_id))
    record_event(conn, entity, entity_id, "state", f"{current} -> {new}: {reason}")
    logger.info("%s %s: %s -> %s (%s)", entity, entity_id, current, new, reason)
    return True


def record_event(conn: Conn, entity: str, entity_id: int | str, kind: str, message: str) -> None:
    conn.execute(
        "INSERT INTO events (entity, entity_id, kind, message) VALUES (%s, %s, %s, %s)",
        (entity, str(entity_id), kind, message),
    )
