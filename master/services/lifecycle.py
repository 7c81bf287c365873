"""The trial and experiment passes: queue runs for active trials, wind down stopped ones, and
finish experiments whose trials are all done. Each pass is idempotent."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from det.common.jsontypes import JSONValue
from det.master import db, states
from det.master.db import Conn
from det.master.handles import MasterState
from det.master.services import allocations, trial_runs

logger = logging.getLogger(__name__)

_EXP_FINAL = {
    states.STOPPING_CANCELED: states.CANCELED,
    states.STOPPING_KILLED: states.CANCELED,
    states.STOPPING_COMPLETED: states.COMPLETED,
    states.STOPPING_ERROR: states.ERROR,
}


def carry_intent(conn: Conn) -> None:
    """Every live allocation of a trial that should wind down is told so, however the two
    raced (an allocation queued while the user killed, paused or canceled, say)."""
    conn.execute(
        "UPDATE allocations a SET kill_requested = true FROM trials t WHERE a.trial_id = t.id"
        " AND t.stop_reason = 'killed' AND a.state <> 'TERMINATED' AND NOT a.kill_requested"
    )
    conn.execute(
        "UPDATE allocations a SET preempt_requested = true FROM trials t WHERE a.trial_id = t.id"
        " AND (t.stop_reason IN ('canceled', 'searcher') OR t.state = 'PAUSED')"
        " AND a.state <> 'TERMINATED' AND NOT a.preempt_requested"
    )


def end_unstarted(conn: Conn) -> None:
    """Queued allocations that were asked to stop never started: end them directly."""
    ids = db.column(
        conn,
        str,
        "SELECT id FROM allocations WHERE state = 'PENDING' AND (preempt_requested OR kill_requested)",
    )
    for allocation_id in ids:
        allocations.on_terminated(conn, allocation_id, 0, "stopped before it was scheduled")


@dataclass(frozen=True, slots=True)
class _Unended:
    """A trial with no live allocation whose experiment is not unmanaged (:func:`trials_pass`)."""

    id: int
    state: str
    stop_reason: str | None
    exp_state: str


@dataclass(frozen=True, slots=True)
class _Unfinished:
    """An experiment that has not ended, and the counts of its trials (:func:`experiments_pass`)."""

    id: int
    state: str
    shutdown: JSONValue
    failure: JSONValue
    open_trials: int
    completed: int
    all_trials: int


def trials_pass(conn: Conn, st: MasterState) -> None:
    rows = db.fetch_rows(
        conn,
        _Unended,
        "SELECT t.id, t.state, t.stop_reason, e.state AS exp_state"
        " FROM trials t JOIN experiments e ON e.id = t.experiment_id"
        f" WHERE t.state NOT IN {states.TERMINAL_SQL} AND NOT e.unmanaged AND NOT EXISTS"
        " (SELECT 1 FROM allocations a WHERE a.trial_id = t.id AND a.state <> 'TERMINATED')"
        " ORDER BY t.id FOR NO KEY UPDATE OF t SKIP LOCKED",
    )
    for trial in rows:
        stop = trial.stop_reason
        if stop == "searcher":
            # Stopped before (or between) runs: nothing to checkpoint.
            trial_runs.finish_trial(conn, trial.id, states.COMPLETED, "stopped by the searcher")
        elif stop in ("canceled", "killed"):
            trial_runs.finish_trial(conn, trial.id, states.CANCELED, f"experiment {stop}")
        elif trial.state == states.ACTIVE and trial.exp_state == states.ACTIVE:
            trial_runs.queue_run(conn, st, trial.id)


def experiments_pass(conn: Conn) -> None:
    rows = db.fetch_rows(
        conn,
        _Unfinished,
        # Only what the pass reads of the searcher's state: decoding all of it, for every
        # unfinished experiment at every tick, was most of the loop's time with many paused.
        "SELECT e.id, e.state, e.searcher_state->'shutdown' AS shutdown,"
        " e.searcher_state->'failure' AS failure,"
        " (SELECT count(*) FROM trials t WHERE t.experiment_id = e.id"
        f" AND t.state NOT IN {states.TERMINAL_SQL}) AS open_trials,"
        " (SELECT count(*) FROM trials t WHERE t.experiment_id = e.id AND t.state = 'COMPLETED') AS completed,"
        " (SELECT count(*) FROM trials t WHERE t.experiment_id = e.id) AS all_trials"
        f" FROM experiments e WHERE NOT e.deleted AND e.state NOT IN {states.ENDED_SQL}"
        " AND NOT e.unmanaged",
    )
    for exp in rows:
        if exp.open_trials:
            continue
        eid = exp.id
        if exp.state in _EXP_FINAL:
            states.transition(
                conn, "experiment", eid, _EXP_FINAL[exp.state], "all trials ended", strict=False
            )
            continue
        if exp.state == states.ACTIVE and exp.shutdown:
            failed = exp.failure or (exp.all_trials > 0 and exp.completed == 0)
            final_stop = states.STOPPING_ERROR if failed else states.STOPPING_COMPLETED
            states.transition(
                conn, "experiment", eid, final_stop, "searcher finished", strict=False
            )
            states.transition(
                conn, "experiment", eid, _EXP_FINAL[final_stop], "all trials ended", strict=False
            )
