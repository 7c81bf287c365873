"""State machines of experiments, trials, allocations, interactive tasks, checkpoints and cloud
instances, as tables, and the only functions that change a ``state`` column (and record why).

Experiments and trials use Determined's states (sent on the wire as ``STATE_<NAME>``).
:func:`transition` moves one row by its id; the functions after it are the moves that write
more than the state (a placement, a config) or many rows at once, each checked against its
table and guarded in SQL by the states the table allows the move from. No other module writes a
``state`` column (``scripts/check_layers.py``, run by ``make check``, holds that).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from psycopg.types.json import Jsonb

from det.common.jsontypes import JSONObject
from det.common.states import AllocationState
from det.master import db
from det.master.db import Conn
from det.master.errors import Conflict
from det.master.provisioner.provider import Instance, InstanceState
from det.master.rows.trials import TrialState

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


def sql_list(values: Iterable[str]) -> str:
    """A set of these constant states as an SQL list literal, ``('A', 'B')``: written into a
    statement (not passed as a parameter) so PostgreSQL can match it to partial indexes and keep
    a prepared statement's plan."""
    return "(" + ", ".join(f"'{v}'" for v in sorted(values)) + ")"


# For SQL: an experiment or trial that ended; an experiment that ended or is being deleted.
TERMINAL_SQL = sql_list(TERMINAL)
ENDED_SQL = sql_list(TERMINAL | {DELETING})

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

# Allocation (one run of a task on slots) states, shared with the agent, whose containers
# report the middle ones (det.common.states: StrEnum members, equal to the stored strings).
PENDING = AllocationState.PENDING
ASSIGNED = AllocationState.ASSIGNED
PULLING = AllocationState.PULLING
STARTING = AllocationState.STARTING
RUNNING = AllocationState.RUNNING
TERMINATING = AllocationState.TERMINATING
TERMINATED = AllocationState.TERMINATED

ALLOCATION_ORDER: list[str] = list(AllocationState)
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

# Continuing an experiment that ended (Determined's ContinueExperiment, single-trial only): the
# same experiment and trial become ACTIVE again. Only continue_experiment makes this move: a user's
# activate or a loop's transition() may not revive an ended experiment.
CONTINUE_TRANSITIONS: dict[str, frozenset[str]] = {s: frozenset({ACTIVE}) for s in TERMINAL}

# Checkpoints: COMPLETED when reported; their files deleted by the GC task or the harness, in
# part (what is left is kept) or in full. A deleted checkpoint stays deleted.
PARTIALLY_DELETED = "PARTIALLY_DELETED"
DELETED = "DELETED"
CHECKPOINT_TRANSITIONS: dict[str, frozenset[str]] = {
    COMPLETED: frozenset({PARTIALLY_DELETED, DELETED}),
    PARTIALLY_DELETED: frozenset({DELETED}),
    DELETED: frozenset(),
}

# Cloud instances: the moves the master makes itself, namely asking the cloud to terminate one
# and noticing that the cloud no longer lists one. What the cloud lists is recorded as it says
# (instances_listed): the cloud is the truth about its machines, and a listing may still show
# running a machine the master asked to terminate a moment ago.
_I = InstanceState
INSTANCE_TRANSITIONS: dict[str, frozenset[str]] = {
    _I.STARTING.value: frozenset({_I.TERMINATING.value, _I.TERMINATED.value}),
    _I.RUNNING.value: frozenset({_I.TERMINATING.value, _I.TERMINATED.value}),
    _I.STOPPING.value: frozenset({_I.TERMINATING.value, _I.TERMINATED.value}),
    _I.STOPPED.value: frozenset({_I.TERMINATING.value, _I.TERMINATED.value}),
    _I.TERMINATING.value: frozenset({_I.TERMINATED.value}),
    _I.TERMINATED.value: frozenset(),
}

_TABLES = {
    "experiment": ("experiments", EXPERIMENT_TRANSITIONS),
    "trial": ("trials", TRIAL_TRANSITIONS),
    "allocation": ("allocations", ALLOCATION_TRANSITIONS),
    "task": ("ntsc_tasks", TASK_TRANSITIONS),
}
# Tables that transition() does not move by id (their own functions below do).
_OTHER_TABLES = {
    "checkpoint": CHECKPOINT_TRANSITIONS,
    "instance": INSTANCE_TRANSITIONS,
    "continue": CONTINUE_TRANSITIONS,
}


def _rules(entity: str) -> dict[str, frozenset[str]]:
    return _TABLES[entity][1] if entity in _TABLES else _OTHER_TABLES[entity]


def can_transition(entity: str, current: str, new: str) -> bool:
    return new in _rules(entity).get(current, frozenset())


def sources(entity: str, new: str) -> list[str]:
    """The states ``entity``'s table allows a move to ``new`` from (sorted, for SQL)."""
    return sorted(s for s, targets in _rules(entity).items() if new in targets)


def _check_move(entity: str, current: str, new: str) -> None:
    """A bulk move the code asks for must be in the table: a programming error otherwise."""
    if not can_transition(entity, current, new):
        raise ValueError(f"{entity}: {current} -> {new} is not in its transition table")


# What follows an experiment's move, in the move's transaction: (connection, experiment id, new
# state). The state machine knows no service; services subscribe (the webhooks queue their events,
# det.master.services.webhooks), so a move and what it triggers commit or roll back together.
ExperimentListener = Callable[[Conn, int, str], None]
_experiment_listeners: list[ExperimentListener] = []


def on_experiment_state(listener: ExperimentListener) -> ExperimentListener:
    """Subscribes ``listener`` to every experiment's state move (a decorator)."""
    if listener not in _experiment_listeners:
        _experiment_listeners.append(listener)
    return listener


def transition(
    conn: Conn, entity: str, entity_id: int | str, new: str, reason: str, *, strict: bool = True
) -> bool:
    """Moves ``entity`` to ``new`` if the table allows it from its current state.

    Returns whether it moved. With ``strict``, a forbidden move raises Conflict (for user
    actions); control loops pass ``strict=False`` and simply skip stale moves.
    """
    table, rules = _TABLES[entity]
    current = db.scalar(
        conn, str, f"SELECT state FROM {table} WHERE id = %s FOR NO KEY UPDATE", (entity_id,)
    )
    if current is None:
        return False
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
    if entity == "experiment":
        for listener in _experiment_listeners:
            listener(conn, int(entity_id), new)
    logger.info("%s %s: %s -> %s (%s)", entity, entity_id, current, new, reason)
    return True


def record_event(conn: Conn, entity: str, entity_id: int | str, kind: str, message: str) -> None:
    conn.execute(
        "INSERT INTO events (entity, entity_id, kind, message) VALUES (%s, %s, %s, %s)",
        (entity, str(entity_id), kind, message),
    )


# -- moves that write more than the state, or many rows ---------------------------------------


def allocations_placed(
    conn: Conn, placements: Mapping[str, Mapping[str, Sequence[str]]]
) -> list[str]:
    """The scheduler's placements (allocation id -> agent id -> slot ids): PENDING -> ASSIGNED
    with the placement, each only if still PENDING (the apply step of a pass that may be stale).
    Returns the ids that moved."""
    moved = []
    for allocation_id, placement in placements.items():
        row = conn.execute(
            "UPDATE allocations SET state = %s, placement = %s, placed_at = now()"
            " WHERE id = %s AND state = ANY(%s) RETURNING id",
            (
                ASSIGNED,
                Jsonb({k: list(v) for k, v in placement.items()}),
                allocation_id,
                sources("allocation", ASSIGNED),
            ),
        ).fetchone()
        if row:
            moved.append(allocation_id)
            record_event(
                conn,
                "allocation",
                allocation_id,
                "state",
                f"PENDING -> ASSIGNED: placed on {', '.join(placement)}",
            )
    return moved


def experiment_trials(conn: Conn, experiment_id: int, current: str, new: str) -> None:
    """Every trial of the experiment that is ``current`` becomes ``new`` (pause, activate); the
    caller holds the experiment's row lock."""
    _check_move("trial", current, new)
    conn.execute(
        "UPDATE trials SET state = %s WHERE experiment_id = %s AND state = %s",
        (new, experiment_id, current),
    )


def experiment_deleted(conn: Conn, experiment_id: int, reason: str) -> None:
    """An ended experiment becomes DELETING (and hidden); its rows go once its checkpoints
    have been collected. Anything else is refused."""
    moved = db.exists(
        conn,
        "UPDATE experiments SET deleted = true, state = %s WHERE id = %s AND state = ANY(%s)"
        " RETURNING id",
        (DELETING, experiment_id, sources("experiment", DELETING)),
    )
    if not moved:
        current = db.scalar(
            conn, str, "SELECT state FROM experiments WHERE id = %s", (experiment_id,)
        )
        raise Conflict(
            f"experiment {experiment_id} is {current or 'gone'}; it cannot become {DELETING}"
        )
    record_event(conn, "experiment", experiment_id, "deleted", reason)


def continue_experiment(
    conn: Conn,
    experiment_id: int,
    trial_id: int,
    config: JSONObject,
    experiment_reason: str,
    trial_reason: str,
) -> None:
    """An ended single-trial experiment and its trial become ACTIVE again (CONTINUE_TRANSITIONS),
    with the experiment's new ``config``; its searcher's failure flag and GC mark are cleared,
    the trial's end and stop reason too. Refused (Conflict) unless both have ended."""
    states = {
        what: db.scalar(
            conn, str, f"SELECT state FROM {table} WHERE id = %s FOR NO KEY UPDATE", (key,)
        )
        for what, table, key in (
            ("experiment", "experiments", experiment_id),
            ("trial", "trials", trial_id),
        )
    }
    for what, state in states.items():
        current = state or "gone"
        if not can_transition("continue", current, ACTIVE):
            raise Conflict(
                f"{what} {trial_id if what == 'trial' else experiment_id} is {current};"
                f" only one that ended can be continued"
            )
    exp_state, trial_state = states["experiment"], states["trial"]
    conn.execute(
        "UPDATE experiments SET state = %s, ended_at = NULL, config = %s, checkpoint_gc_at = NULL,"
        " searcher_state = CASE WHEN searcher_state IS NULL THEN NULL"
        "   ELSE jsonb_set(searcher_state, '{failure}', 'false') END"
        " WHERE id = %s",
        (ACTIVE, json.dumps(config), experiment_id),
    )
    conn.execute(
        "UPDATE trials SET state = %s, ended_at = NULL, stop_reason = NULL WHERE id = %s",
        (ACTIVE, trial_id),
    )
    record_event(
        conn, "experiment", experiment_id, "state", f"{exp_state} -> ACTIVE: {experiment_reason}"
    )
    record_event(conn, "trial", trial_id, "state", f"{trial_state} -> ACTIVE: {trial_reason}")


def checkpoints_deleted(conn: Conn, uuids: Sequence[Any]) -> int:
    """The GC task deleted these checkpoints' files: DELETED, without resources. Returns how
    many moved (an already deleted one does not)."""
    cur = conn.execute(
        "UPDATE checkpoints SET state = %s, resources = '{}' WHERE uuid = ANY(%s)"
        " AND state = ANY(%s)",
        (DELETED, list(uuids), sources("checkpoint", DELETED)),
    )
    return cur.rowcount


def checkpoint_files_left(conn: Conn, uuid: str, left: Mapping[str, int]) -> None:
    """A deletion was reported for checkpoint ``uuid``: ``left`` is what remains (DELETED when
    nothing, else PARTIALLY_DELETED; the same report again is no move and is accepted). A deleted
    checkpoint cannot get files back (Conflict)."""
    new = PARTIALLY_DELETED if left else DELETED
    moved = db.exists(
        conn,
        "UPDATE checkpoints SET resources = %s, state = %s WHERE uuid = %s AND state = ANY(%s)"
        " RETURNING uuid",
        (Jsonb(dict(left)), new, uuid, [*sources("checkpoint", new), new]),
    )
    if not moved:
        current = db.scalar(conn, str, "SELECT state FROM checkpoints WHERE uuid = %s", (uuid,))
        if current is not None:
            raise Conflict(f"checkpoint {uuid} is {current}; it cannot become {new}")


# An instance row as the cloud describes it: the columns and their values, in this order.
_INSTANCE_COLUMNS = "id, resource_pool, instance_type, zone, market, state"


def _instance_values(pool: str, inst: Instance) -> tuple[str, str, str, str | None, str, str]:
    return (inst.id, pool, inst.instance_type, inst.zone, inst.market.value, inst.state.value)


def instances_launched(
    conn: Conn, pool: str, launched: Iterable[Instance], option_index: int, reason: str
) -> None:
    """Instances the master just launched, in the state the cloud gave (a later list may have
    recorded one already: then only which option and why are added)."""
    for inst in launched:
        conn.execute(
            f"INSERT INTO instances ({_INSTANCE_COLUMNS}, launched_at, option_index, reason)"
            " VALUES (%s, %s, %s, %s, %s, %s, now(), %s, %s)"
            " ON CONFLICT (id) DO UPDATE SET option_index = EXCLUDED.option_index,"
            " reason = EXCLUDED.reason",
            (*_instance_values(pool, inst), option_index, reason),
        )


def instances_listed(conn: Conn, pool: str, instances: Iterable[Instance]) -> None:
    """What the cloud lists for ``pool``, recorded as it says (an instance seen again is no
    longer terminated); an instance it no longer lists has ended (TERMINATED)."""
    ids = []
    for inst in instances:
        ids.append(inst.id)
        live = inst.state in (_I.STARTING, _I.RUNNING)
        conn.execute(
            f"INSERT INTO instances ({_INSTANCE_COLUMNS}, launched_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, zone = EXCLUDED.zone,"
            " terminated_at = CASE WHEN %s THEN NULL ELSE instances.terminated_at END",
            (*_instance_values(pool, inst), inst.launched_at, live),
        )
    conn.execute(
        "UPDATE instances SET state = %s, terminated_at = coalesce(terminated_at, now())"
        " WHERE resource_pool = %s AND state = ANY(%s) AND NOT (id = ANY(%s))",
        (_I.TERMINATED.value, pool, sources("instance", _I.TERMINATED.value), ids),
    )


def instances_terminating(conn: Conn, reasons: Mapping[str, str]) -> None:
    """The master asked the cloud to terminate these instances (id -> why)."""
    for iid, reason in reasons.items():
        conn.execute(
            "UPDATE instances SET state = %s, terminated_at = coalesce(terminated_at, now()),"
            " reason = %s WHERE id = %s AND state = ANY(%s)",
            (_I.TERMINATING.value, reason, iid, sources("instance", _I.TERMINATING.value)),
        )


# Unmanaged experiments (core_v2 scripts run outside the cluster): their trials take whatever
# state their script reports (a rerun makes an ended trial ACTIVE again), and the experiment
# follows its most advanced trial, as Determined's UpdateUnmanagedExperimentStatesTx does.
UNMANAGED_STATES = frozenset({ACTIVE, PAUSED, COMPLETED, CANCELED, ERROR})
_UNMANAGED_RANK = {PAUSED: 10, CANCELED: 15, ERROR: 20, COMPLETED: 30, ACTIVE: 40}
_OTHER_TABLES["unmanaged"] = {s: UNMANAGED_STATES - {s} for s in UNMANAGED_STATES}


def unmanaged_experiment_state(trial_states: Iterable[str]) -> str | None:
    """The state of an unmanaged experiment whose trials are in ``trial_states`` (None: no
    trials). Pure."""
    ranked = [s for s in trial_states if s in _UNMANAGED_RANK]
    return max(ranked, key=_UNMANAGED_RANK.__getitem__) if ranked else None


# The event kind that marks an unmanaged trial the master put in ERROR because its script fell
# silent (not one its script reported): a later heartbeat from that script revives it.
UNMANAGED_LOST = "lost"


def unmanaged_trial(
    conn: Conn, trial_id: int, new: str, reason: str, *, run: bool = False, lost: bool = False
) -> int:
    """Unmanaged trial ``trial_id`` is now ``new`` (its script said so); ``run`` starts a new
    run (StartTrial: run_id + 1). ``lost``: the master marks it ERROR because its script has
    not reported for too long; it ends when it was last heard from. Its experiment follows.
    Returns the trial's run id. The caller checked that the trial is unmanaged and that ``new``
    is in UNMANAGED_STATES."""
    if new not in UNMANAGED_STATES:
        raise ValueError(f"unmanaged trial: {new} is not a state it can take")
    row = db.fetch_row(
        conn,
        TrialState,
        "SELECT state, experiment_id FROM trials WHERE id = %s FOR NO KEY UPDATE",
        (trial_id,),
    )
    if row is None:
        raise LookupError(f"unmanaged trial {trial_id} does not exist")
    ended = ("last_activity" if lost else "now()") if new in TERMINAL else "NULL"
    heard = "last_activity" if lost else "now()"
    run_id = db.one_int(
        conn,
        f"UPDATE trials SET state = %s, ended_at = {ended}, last_activity = {heard},"
        " run_id = run_id + %s, started_at = coalesce(started_at, now())"
        " WHERE id = %s RETURNING run_id",
        (new, 1 if run else 0, trial_id),
    )
    if row.state != new:
        kind = UNMANAGED_LOST if lost else "state"
        record_event(conn, "trial", trial_id, kind, f"{row.state} -> {new}: {reason}")
    _unmanaged_experiment_follows(conn, row.experiment_id)
    return run_id


def _unmanaged_experiment_follows(conn: Conn, experiment_id: int) -> None:
    exp_state = db.scalar(
        conn, str, "SELECT state FROM experiments WHERE id = %s FOR NO KEY UPDATE", (experiment_id,)
    )
    if exp_state is None:
        raise LookupError(f"experiment {experiment_id} of an unmanaged trial does not exist")
    trial_states = db.column(
        conn, str, "SELECT state FROM trials WHERE experiment_id = %s", (experiment_id,)
    )
    new = unmanaged_experiment_state(trial_states)
    if new is None or new == exp_state:
        return
    ended = "now()" if new in TERMINAL else "NULL"
    conn.execute(
        f"UPDATE experiments SET state = %s, ended_at = {ended} WHERE id = %s",
        (new, experiment_id),
    )
    record_event(
        conn, "experiment", experiment_id, "state", f"{exp_state} -> {new}: its trials are {new}"
    )
