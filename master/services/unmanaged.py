"""Unmanaged experiments: Determined's ``core_v2`` scripts that run outside the cluster (a
laptop, a Slurm node) and report to the master with their owner's session token.

The master never schedules nor searches them: no allocation, no searcher, no container. Their
trials are created by the script (CreateTrial, PutTrial), started by it (StartTrial: a new run),
and take the states it reports (PatchTrial); the experiment follows its most advanced trial
(:func:`det.master.states.unmanaged_trial`). External ids (PutExperiment, PutTrial) let a rerun
find its experiment and trial again: an experiment's are unique per owner, a trial's within its
experiment. Callers check who may change what (:mod:`det.master.api._access`).
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from det.master import db, limits, states
from det.master.db import Conn
from det.master.errors import Conflict, InvalidArgument, NotFound
from det.master.handles import MasterState
from det.master.rows.experiments import Experiment
from det.master.services import containers, experiments

logger = logging.getLogger(__name__)

# What a script may report in PatchTrial (the wire's trialv1State without STATE_), as det's state.
_REPORTED = {
    "ACTIVE": states.ACTIVE,
    "RUNNING": states.ACTIVE,
    "QUEUED": states.ACTIVE,
    "PULLING": states.ACTIVE,
    "STARTING": states.ACTIVE,
    "PAUSED": states.PAUSED,
    "COMPLETED": states.COMPLETED,
    "CANCELED": states.CANCELED,
    "ERROR": states.ERROR,
}


# Advisory lock class (two-key form) under which two puts of one external id wait for each
# other, so the second finds what the first created instead of failing on the unique index.
_PUT_LOCK_CLASS = 0x756E6D31


def _lock_external(conn: Conn, key: str) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_PUT_LOCK_CLASS, key))


def _external_id(field: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{field}: required non-empty string")
    return limits.text(field, value, limits.NAME) or value


def put_experiment(
    conn: Conn,
    st: MasterState,
    *,
    owner_id: int,
    admin: bool,
    config_text: str,
    external_id: Any,
) -> Experiment:
    """The caller's unmanaged experiment named ``external_id``: created, or found and given the
    new config (its name, description and labels too), as Determined's PutExperiment does."""
    ext = _external_id("externalExperimentId", external_id)
    _lock_external(conn, f"e{owner_id}:{ext}")
    found = db.scalar(
        conn,
        int,
        "SELECT id FROM experiments WHERE owner_id = %s AND external_experiment_id = %s"
        " AND NOT deleted FOR NO KEY UPDATE",
        (owner_id, ext),
    )
    if found is None:
        row = experiments.create(
            conn,
            st,
            owner_id=owner_id,
            config_text=config_text,
            files=[],
            activate=False,
            validate_only=False,
            admin=admin,
            unmanaged=True,
            external_id=ext,
        )
        assert row is not None
        return row
    parsed = experiments.parse_config(st, config_text, unmanaged=True)
    cfg = parsed.to_dict()
    containers.check_policy(st, cfg, admin=admin)  # as experiments.create does
    limits.text("name", cfg.get("name"), limits.NAME)
    limits.text("description", cfg.get("description"), limits.DESCRIPTION)
    limits.labels("labels", cfg.get("labels"))
    old = experiments.get(conn, found)
    # The stored name stays the one the first run gave when the script names none (core_v2
    # makes up a random one each run).
    conn.execute(
        "UPDATE experiments SET config = %s, description = %s, labels = %s WHERE id = %s",
        (
            Jsonb({**cfg, "name": old["name"]}),
            cfg.get("description") or "",
            Jsonb(parsed.labels),
            found,
        ),
    )
    return experiments.get(conn, found)


@dataclass(frozen=True, slots=True)
class _Owned:
    id: int
    owner_id: int


def trial_by_external_ids(conn: Conn, caller_id: int, experiment_ext: str, trial_ext: str) -> int:
    """GetTrialByExternalID: the id of the trial named ``trial_ext`` in the experiment named
    ``experiment_ext``. External experiment ids are unique per owner in det (Determined's are
    cluster-wide), so the caller's own experiment of that name wins; another user's is found
    only when it is the one experiment of that name (users read every experiment)."""
    rows = (
        conn.cursor(row_factory=class_row(_Owned))
        .execute(
            "SELECT t.id, e.owner_id FROM trials t JOIN experiments e ON e.id = t.experiment_id"
            " WHERE e.external_experiment_id = %s AND t.external_trial_id = %s AND NOT e.deleted"
            " ORDER BY t.id",
            (experiment_ext, trial_ext),
        )
        .fetchall()
    )
    own = [r for r in rows if r.owner_id == caller_id]
    if own:
        return own[0].id
    if len(rows) == 1:
        return rows[0].id
    if not rows:
        raise NotFound(
            f"no trial with external id '{trial_ext}' in an experiment with external id"
            f" '{experiment_ext}'"
        )
    raise InvalidArgument(
        f"externalExperimentId: {len(rows)} users' experiments have the external id"
        f" '{experiment_ext}' (external ids are per user in det): only their owners find theirs"
    )


def require_unmanaged_experiment(conn: Conn, experiment_id: int) -> None:
    """NotFound unless the experiment exists, InvalidArgument unless it is unmanaged."""
    if not experiments.get(conn, experiment_id)["unmanaged"]:
        raise InvalidArgument(
            f"experimentId: experiment {experiment_id} is managed by the cluster;"
            " trials are created only in unmanaged experiments"
        )


def create_trial(conn: Conn, experiment_id: int, hparams: Any, external_id: Any = None) -> int:
    """A trial of unmanaged experiment ``experiment_id`` (PAUSED until its script starts it);
    with ``external_id``, the one of that name if it exists. Returns its id."""
    require_unmanaged_experiment(conn, experiment_id)
    if hparams is not None and not isinstance(hparams, dict):
        raise InvalidArgument("hparams: must be an object")
    ext = None if external_id is None else _external_id("externalTrialId", external_id)
    if ext is not None:
        _lock_external(conn, f"t{experiment_id}:{ext}")
        found = db.scalar(
            conn,
            int,
            "SELECT id FROM trials WHERE experiment_id = %s AND external_trial_id = %s",
            (experiment_id, ext),
        )
        if found is not None:
            return found
    suffix = uuid.uuid4().hex
    trial_id = db.one_int(
        conn,
        "INSERT INTO trials (experiment_id, request_id, task_id, hparams, seed, state,"
        " external_trial_id) VALUES (%s, %s, %s, %s, 0, %s, %s) RETURNING id",
        (
            experiment_id,
            f"unmanaged-{suffix}",
            f"{experiment_id}.{suffix}",
            Jsonb(hparams or {}),
            states.PAUSED,
            ext,
        ),
    )
    states.record_event(conn, "trial", trial_id, "created", "created by its unmanaged script")
    return trial_id


@dataclass(frozen=True, slots=True)
class _Trial:
    id: int
    run_id: int
    latest_checkpoint: uuid.UUID | None
    unmanaged: bool


@dataclass(frozen=True, slots=True)
class _Checkpoint:
    uuid: uuid.UUID
    steps_completed: int


@dataclass(frozen=True, slots=True)
class _LastState:
    state: str
    last_kind: str | None


@dataclass(frozen=True, slots=True)
class _Silent:
    id: int
    task_id: str
    last_activity: dt.datetime


@dataclass(frozen=True, slots=True)
class TaskTrial:
    """An unmanaged trial found by its task id (:func:`trial_of_task`)."""

    id: int
    owner_id: int


def _trial(conn: Conn, trial_id: int) -> _Trial:
    cur = conn.cursor(row_factory=class_row(_Trial))
    row = cur.execute(
        "SELECT t.id, t.run_id, t.latest_checkpoint, e.unmanaged FROM trials t"
        " JOIN experiments e ON e.id = t.experiment_id WHERE t.id = %s AND NOT e.deleted",
        (trial_id,),
    ).fetchone()
    if row is None:
        raise NotFound(f"trial {trial_id} not found")
    if not row.unmanaged:
        raise InvalidArgument(f"trialId: trial {trial_id} is managed by the cluster")
    return row


def start_trial(conn: Conn, trial_id: int, resume: bool) -> tuple[int, int, str | None]:
    """A new run of unmanaged trial ``trial_id`` (StartTrial): (its run id, the steps of the
    latest checkpoint, that checkpoint's uuid); the checkpoint only from the second run on.
    Without ``resume`` a trial that already ran is refused."""
    row = _trial(conn, trial_id)
    if not resume and row.run_id != 0:
        raise Conflict(f"trial {trial_id} has already been started")
    run_id = states.unmanaged_trial(conn, trial_id, states.ACTIVE, "its script started", run=True)
    if run_id <= 1 or row.latest_checkpoint is None:
        return run_id, 0, None
    ckpt = db.fetch_row(
        conn,
        _Checkpoint,
        "SELECT uuid, steps_completed FROM checkpoints WHERE uuid = %s AND state = 'COMPLETED'",
        (row.latest_checkpoint,),
    )
    if ckpt is None:
        return run_id, 0, None
    return run_id, int(ckpt.steps_completed), str(ckpt.uuid)


def is_unmanaged_trial(conn: Conn, trial_id: int) -> bool:
    return bool(
        db.scalar(
            conn,
            bool,
            "SELECT e.unmanaged FROM trials t JOIN experiments e ON e.id = t.experiment_id"
            " WHERE t.id = %s",
            (trial_id,),
        )
    )


def report_state(conn: Conn, trial_id: int, state: str | None) -> None:
    """PatchTrial from an unmanaged trial's script: a heartbeat, with or without a state. A
    heartbeat from a script the master took for lost (:func:`mark_lost`) makes its trial ACTIVE
    again: the script is alive (a laptop that slept, a network that came back)."""
    _trial(conn, trial_id)
    if state is None:
        if _marked_lost(conn, trial_id):
            states.unmanaged_trial(
                conn, trial_id, states.ACTIVE, "its script reported again after it was lost"
            )
            return
        conn.execute("UPDATE trials SET last_activity = now() WHERE id = %s", (trial_id,))
        return
    new = _REPORTED.get(state.removeprefix("STATE_"))
    if new is None:
        allowed = ", ".join(f"STATE_{s}" for s in sorted(_REPORTED))
        raise InvalidArgument(f"state: {state} is not one an unmanaged trial reports ({allowed})")
    states.unmanaged_trial(conn, trial_id, new, f"its script reported {state}")


def _marked_lost(conn: Conn, trial_id: int) -> bool:
    """Whether the trial is in ERROR because the master marked it lost (its latest state event
    is the master's, not one its script reported)."""
    row = db.fetch_row(
        conn,
        _LastState,
        "SELECT t.state, (SELECT ev.kind FROM events ev WHERE ev.entity = 'trial'"
        "   AND ev.entity_id = t.id::text AND ev.kind IN ('state', %s) ORDER BY ev.id DESC LIMIT 1)"
        "   AS last_kind FROM trials t WHERE t.id = %s",
        (states.UNMANAGED_LOST, trial_id),
    )
    return bool(row and row.state == states.ERROR and row.last_kind == states.UNMANAGED_LOST)


def mark_lost(conn: Conn, timeout_seconds: float) -> list[int]:
    """Unmanaged trials whose script has sent nothing (no heartbeat, no state) for longer than
    ``timeout_seconds`` are ERROR, ended when last heard from; their experiments follow. As
    Determined's master does (5 minutes; core_v2 sends a heartbeat every 60 s). Returns their
    ids."""
    lost = db.fetch_rows(
        conn,
        _Silent,
        "SELECT t.id, t.task_id, t.last_activity FROM experiments e"
        " JOIN trials t ON t.experiment_id = e.id"
        " WHERE e.unmanaged AND e.state = %s AND NOT e.deleted AND t.state = %s"
        " AND t.last_activity < now() - make_interval(secs => %s)"
        " ORDER BY t.id FOR NO KEY UPDATE OF t SKIP LOCKED",
        (states.ACTIVE, states.ACTIVE, timeout_seconds),
    )
    for r in lost:
        reason = (
            f"its script sent no heartbeat for {timeout_seconds:.0f} s"
            f" (last heard from at {r.last_activity.isoformat(timespec='seconds')});"
            " a heartbeat from it makes the trial ACTIVE again"
        )
        states.unmanaged_trial(conn, r.id, states.ERROR, reason, lost=True)
        # The trial's log says why (det e describe shows the master's last line of an errored
        # trial; Determined leaves this as a to-do).
        conn.execute(
            "INSERT INTO task_logs (task_id, log, level, stdtype, source)"
            " VALUES (%s, %s, 'ERROR', 'stderr', 'master')",
            (r.task_id, f"lost: {reason}\n"),
        )
        logger.warning("unmanaged trial %s lost: no heartbeat from its script", r.id)
    return [r.id for r in lost]


def report_progress(conn: Conn, trial_id: int, progress: float) -> None:
    """An unmanaged trial's script reports its progress (0..1): its experiment's progress (the
    last one reported by any of its trials). Nothing for a managed trial."""
    conn.execute(
        "UPDATE experiments e SET progress = %s FROM trials t"
        " WHERE t.id = %s AND e.id = t.experiment_id AND e.unmanaged",
        (progress, trial_id),
    )


def trial_of_task(conn: Conn, task_id: str) -> TaskTrial | None:
    """The unmanaged trial whose task id is ``task_id`` (its id and owner), or None."""
    cur = conn.cursor(row_factory=class_row(TaskTrial))
    return cur.execute(
        "SELECT t.id, e.owner_id FROM trials t JOIN experiments e ON e.id = t.experiment_id"
        " WHERE t.task_id = %s AND e.unmanaged",
        (task_id,),
    ).fetchone()
