"""The searcher pass: feeds each experiment's pending searcher events to its (pure) searcher and
applies the actions, all in one transaction per experiment, so every event is seen exactly once
and every trial is created exactly once (``UNIQUE (experiment_id, request_id)``) even if the
leader dies at any point.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, NotRequired

from psycopg.rows import class_row
from psycopg.types.json import Jsonb
from typing_extensions import TypedDict

from det.common.jsontypes import JSONObject, JSONValue
from det.master import db, states
from det.master import searcher as search
from det.master.db import Conn
from det.master.expconf import stored
from det.master.expconf.schema import ExperimentConfig

logger = logging.getLogger(__name__)


class SearcherState(TypedDict):
    """``experiments.searcher_state``: whether the search has shut down (and failed), and the
    searcher's snapshot (:meth:`Searcher.snapshot`)."""

    shutdown: bool
    failure: bool
    method: NotRequired[JSONObject]


@dataclasses.dataclass(frozen=True, slots=True)
class _Searched:
    """An experiment as its searcher pass reads it (locked)."""

    id: int
    state: str
    config: JSONObject
    searcher_state: SearcherState | None


@dataclasses.dataclass(frozen=True, slots=True)
class _Event:
    """A ``searcher_events`` row not yet processed."""

    id: int
    kind: str
    request_id: str
    payload: JSONObject | None


def pending_experiments(conn: Conn) -> list[int]:
    return db.column(
        conn,
        int,
        f"SELECT id FROM experiments e WHERE NOT deleted AND state NOT IN {states.ENDED_SQL}"
        " AND NOT unmanaged"
        " AND (searcher_state IS NULL OR EXISTS (SELECT 1 FROM searcher_events s"
        "      WHERE s.experiment_id = e.id AND NOT s.processed))"
        " ORDER BY id",
    )


def experiment_seed(cfg: ExperimentConfig) -> int:
    """The search's seed: parsing fills one into every stored config (0 only for a config
    written without it)."""
    seed = cfg.reproducibility.experiment_seed
    return seed if seed is not None else 0


def run_for_experiment(conn: Conn, experiment_id: int) -> bool:
    """Feeds the experiment's unprocessed events to its searcher and applies what it decides;
    whether it decided anything (trials to create or stop, the search's end): then the rest of
    the control loop's round has work (det.master.loop.SEARCHER_ONLY). False also when another
    pass holds the experiment."""
    exp = (
        conn.cursor(row_factory=class_row(_Searched))
        .execute(
            "SELECT id, state, config, searcher_state FROM experiments WHERE id = %s"
            " FOR NO KEY UPDATE SKIP LOCKED",
            (experiment_id,),
        )
        .fetchone()
    )
    if exp is None:
        return False
    config = exp.config
    wrapper = exp.searcher_state
    actions: list[Any] = []
    if wrapper is None:
        method = search.new_searcher(
            config["searcher"],
            config.get("hyperparameters") or {},
            experiment_seed(stored.experiment_config(experiment_id, config)),
        )
        wrapper = SearcherState(shutdown=False, failure=False)
        actions += method.initial_trials()
    else:
        method = search.Searcher.restore(wrapper.get("method"))
    events = (
        conn.cursor(row_factory=class_row(_Event))
        .execute(
            "SELECT id, kind, request_id, payload FROM searcher_events"
            " WHERE experiment_id = %s AND NOT processed ORDER BY id",
            (experiment_id,),
        )
        .fetchall()
    )
    for ev in events:
        p = ev.payload or {}
        rid = ev.request_id
        if ev.kind == "validation":
            actions += method.validation_completed(rid, _number(p["metric"]), _number(p["time"]))
        elif ev.kind == "exited":
            actions += method.trial_exited(rid)
        elif ev.kind == "early_exit":
            actions += method.trial_exited_early(
                rid, search.ExitedReason[str(p.get("reason", "ERRORED"))]
            )
    if events:
        # One pass number for the batch (an uncorrelated subquery: evaluated once): the order
        # the searcher saw the events in is (pass, id) (migration 0048).
        conn.execute(
            "UPDATE searcher_events SET processed = true,"
            " processed_pass = (SELECT nextval('searcher_event_passes')) WHERE id = ANY(%s)",
            ([e.id for e in events],),
        )
    created = apply_actions(conn, exp, actions, wrapper)
    for rid in created:
        actions_after = method.trial_created(rid)
        actions += actions_after
        apply_actions(conn, exp, actions_after, wrapper)
    wrapper["method"] = method.snapshot()
    conn.execute(
        "UPDATE experiments SET searcher_state = %s, progress = %s WHERE id = %s",
        (Jsonb(wrapper), method.progress(_reported(conn, experiment_id)), experiment_id),
    )
    return bool(actions)


@dataclasses.dataclass(frozen=True, slots=True)
class _Progress:
    request_id: str
    progress: float


@dataclasses.dataclass(frozen=True, slots=True)
class _Progressing:
    """A trial's experiment and its stored searcher (:func:`trial_progress`)."""

    id: int
    searcher_state: JSONValue


def _reported(conn: Conn, experiment_id: int) -> dict[str, float]:
    """The training progress each of the experiment's trials last reported, by request id."""
    rows = db.fetch_rows(
        conn,
        _Progress,
        "SELECT request_id, progress FROM trials WHERE experiment_id = %s AND progress IS NOT NULL",
        (experiment_id,),
    )
    return {str(r.request_id): float(r.progress) for r in rows}


def trial_progress(conn: Conn, trial_id: int, progress: float) -> None:
    """A managed trial reports its training progress (a fraction in [0, 1]): stored on the
    trial, and its experiment's progress computed again by its searcher, unfinished trials'
    training included. Under the experiment's lock, as the searcher pass writes it."""
    row = db.fetch_row(
        conn,
        _Progressing,
        "SELECT e.id, e.searcher_state FROM trials t JOIN experiments e ON e.id = t.experiment_id"
        " WHERE t.id = %s AND NOT e.unmanaged FOR NO KEY UPDATE OF e",
        (trial_id,),
    )
    if row is None:
        return
    conn.execute("UPDATE trials SET progress = %s WHERE id = %s", (progress, trial_id))
    wrapper = row.searcher_state
    if not isinstance(wrapper, dict) or "method" not in wrapper:
        return  # the searcher pass computes it when it first runs
    method = search.Searcher.restore(wrapper["method"])
    conn.execute(
        "UPDATE experiments SET progress = %s WHERE id = %s",
        (method.progress(_reported(conn, row.id)), row.id),
    )


def _number(value: object) -> float:
    """A validation event's number (the ingest writes only finite floats)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"searcher event: {value!r} is not a number")
    return float(value)


def apply_actions(
    conn: Conn, exp: _Searched, actions: list[Any], wrapper: SearcherState
) -> list[str]:
    created: list[str] = []
    for action in actions:
        if isinstance(action, search.CreateTrial):
            if _create_trial(conn, exp, action):
                created.append(action.request_id)
        elif isinstance(action, search.StopTrial):
            _stop_trial(conn, exp.id, action.request_id)
        elif isinstance(action, search.Shutdown):
            wrapper["shutdown"] = True
            wrapper["failure"] = bool(action.failure)
            states.record_event(
                conn,
                "experiment",
                exp.id,
                "searcher",
                "searcher finished" + (" with failure" if action.failure else ""),
            )
    return created


def _create_trial(conn: Conn, exp: _Searched, action: search.CreateTrial) -> bool:
    if exp.state in states.STOPPING or exp.state in states.TERMINAL:
        # Canceled or killed before the searcher asked: there is nothing to run it for.
        return False
    trial_id = db.one_int(conn, "SELECT nextval('trials_id_seq') AS id")
    state = states.PAUSED if exp.state == states.PAUSED else states.ACTIVE
    created = db.exists(
        conn,
        "INSERT INTO trials (id, experiment_id, request_id, task_id, hparams, seed, state)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (experiment_id, request_id) DO NOTHING RETURNING id",
        (
            trial_id,
            exp.id,
            action.request_id,
            # Determined's form, "<experiment id>.<request uuid>": its clients check task ids
            # against it (``det task logs`` refuses anything else as a partial UUID).
            f"{exp.id}.{action.request_id}",
            Jsonb(action.hparams),
            int(action.seed) % (2**31),
            state,
        ),
    )
    if not created:
        return False
    states.record_event(
        conn, "trial", trial_id, "created", f"created by the searcher ({action.request_id})"
    )
    return True


def _stop_trial(conn: Conn, experiment_id: int, request_id: str) -> None:
    trial = db.scalar(
        conn,
        int,
        "SELECT id FROM trials WHERE experiment_id = %s AND request_id = %s"
        f" AND state NOT IN {states.TERMINAL_SQL}",
        (experiment_id, request_id),
    )
    if trial is None:
        return
    # The trial checkpoints and exits 0 on the preemption signal; it is never killed mid-step.
    # Lock order: allocations before trials (as when an allocation ends).
    conn.execute(
        "UPDATE allocations SET preempt_requested = true WHERE trial_id = %s AND state <> 'TERMINATED'",
        (trial,),
    )
    conn.execute(
        "UPDATE trials SET stop_reason = coalesce(stop_reason, 'searcher') WHERE id = %s",
        (trial,),
    )
    states.record_event(conn, "trial", trial, "stop", "stopped by the searcher")
