"""Checkpoint GC: when an experiment has ended, delete what its retention policy does not keep.

The policy is :mod:`det.master.checkpoint_policy`. The deleting is done by a zero-slot task in
the experiment's resource pool (``python3 -m det.exec.gc_checkpoints`` in the experiment's
image, with its storage config and bind mounts), as in Determined: agents can reach the storage
the trials wrote to, the master need not. When that task exits 0 the checkpoints are marked
``DELETED`` (their rows stay, without resources); if it fails they stay as they were and an
event says so. Checkpoints registered in the model registry are never collected. Each
experiment is collected once when it ends, and once more (everything, with its TensorBoard
files) when it is deleted; ``delete_tensorboards`` deletes only the TensorBoard files.
A GC task whose agent was lost may not have run at all: it is queued again (deleting is
idempotent) for the checkpoints not yet deleted, up to ``MAX_LOST_RUNS`` times per experiment.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from typing import Final, TypedDict

from psycopg.rows import class_row

from det.common.container_spec import ContainerSpec
from det.common.jsontypes import JSONObject
from det.master import db, states
from det.master.checkpoint_policy import Checkpoint, Retention, to_delete
from det.master.config import MasterConfig
from det.master.db import Conn
from det.master.errors import Conflict, InvalidArgument, NotFound
from det.master.expconf import stored
from det.master.expconf.schema import ExperimentConfig
from det.master.handles import MasterState
from det.master.services import allocation_rows, containers
from det.master.services import checkpoints as ckpt_svc
from det.master.services.allocation_rows import Allocation

logger = logging.getLogger(__name__)


class GcImagePull(TypedDict):
    forcePull: bool
    registryAuth: dict[str, str] | None


DELETED = states.DELETED
TASK_TYPE: Final = "CHECKPOINT_GC"
#: How many GC runs of one experiment may end by a lost agent before it is not queued again.
MAX_LOST_RUNS = 3


@dataclasses.dataclass(frozen=True, slots=True)
class _Target:
    """Whose GC task is queued: the experiment, and its job and pool (the task's)."""

    id: int
    job_id: str
    resource_pool: str


@dataclasses.dataclass(frozen=True, slots=True)
class _Deleting:
    """An experiment whose TensorBoard files are asked to go (:func:`delete_tensorboards`)."""

    id: int
    state: str
    job_id: str
    resource_pool: str


@dataclasses.dataclass(frozen=True, slots=True)
class _Ended:
    """An experiment due for collection (:func:`gc_pass`)."""

    id: int
    config: JSONObject
    job_id: str
    resource_pool: str


@dataclasses.dataclass(frozen=True, slots=True)
class _Lost:
    """A GC run whose agent was lost (:func:`_requeue_lost`)."""

    allocation_id: str
    experiment_id: int
    uuids: list[uuid.UUID]
    tensorboards: bool
    globs: list[str] | None
    job_id: str
    resource_pool: str


@dataclasses.dataclass(frozen=True, slots=True)
class _Deletable:
    """A checkpoint ``det checkpoint delete`` names, with its experiment's job (:func:`delete`)."""

    uuid: uuid.UUID
    state: str
    experiment_id: int
    exp_state: str
    job_id: str
    resource_pool: str
    registered: bool


@dataclasses.dataclass(frozen=True, slots=True)
class _Run:
    """A ``checkpoint_gc`` row: what one GC run deletes."""

    experiment_id: int
    uuids: list[uuid.UUID]
    tensorboards: bool
    globs: list[str] | None


@dataclasses.dataclass(frozen=True, slots=True)
class _Spec(_Run):
    """A GC run with its experiment's config (its storage, image and mounts)."""

    config: JSONObject


def retention(cfg: ExperimentConfig) -> Retention:
    experiment_best, trial_best, trial_latest = stored.retention(cfg)
    return Retention(
        experiment_best=experiment_best,
        trial_best=trial_best,
        trial_latest=trial_latest,
        smaller_is_better=cfg.searcher.smaller_is_better,
    )


def candidates(conn: Conn, experiment_id: int, metric: str) -> list[Checkpoint]:
    out = []
    for r in ckpt_svc.list_for(conn, experiment_id=experiment_id):
        if r["state"] != "COMPLETED":
            continue
        value = ((r["validation"] or {}).get("avg_metrics") or {}).get(metric)
        number = float(value) if isinstance(value, int | float) else None
        # Rows of an experiment's trials: each has a trial.
        trial_id = r["trial_id"] or 0
        out.append(Checkpoint(str(r["uuid"]), trial_id, r["steps_completed"], number))
    return out


def _metric(experiment_id: int, config: JSONObject) -> str:
    return stored.experiment_config(experiment_id, config).searcher.metric


# Which experiments a GC is due for: (the column that marks it queued, which experiments,
# whether everything goes (the TensorBoard files too), the GC task's run number).
_DUE = (
    (
        "checkpoint_gc_at",
        f"NOT e.deleted AND e.state IN {states.TERMINAL_SQL}",
        False,
        1,
    ),
    ("delete_gc_at", "e.deleted", True, 2),
)


def gc_pass(conn: Conn, st: MasterState) -> None:
    """Queue a GC task for every ended experiment not yet collected, and for every deleted one
    (all its checkpoints)."""
    for column, which, everything, run in _DUE:
        # An unmanaged experiment's checkpoints are kept as its script wrote them: its storage
        # may be one the cluster cannot reach (its own machine's disk).
        kept = "" if everything else " AND NOT e.unmanaged"
        rows = (
            conn.cursor(row_factory=class_row(_Ended))
            .execute(
                "SELECT e.id, e.config, j.id AS job_id, j.resource_pool FROM experiments e"
                f" JOIN jobs j ON j.experiment_id = e.id WHERE e.{column} IS NULL AND {which}{kept}"
                " FOR NO KEY UPDATE OF e SKIP LOCKED"
            )
            .fetchall()
        )
        for exp in rows:
            conn.execute(f"UPDATE experiments SET {column} = now() WHERE id = %s", (exp.id,))
            policy = (
                Retention(0, 0, 0)
                if everything
                else retention(stored.experiment_config(exp.id, exp.config))
            )
            target = _Target(exp.id, exp.job_id, exp.resource_pool)
            _queue(conn, st, target, exp.config, run=run, policy=policy, tensorboards=everything)
    _requeue_lost(conn, st)


def _requeue_lost(conn: Conn, st: MasterState) -> None:
    """GC runs that ended because their agent was lost, queued again for what is left."""
    rows = (
        conn.cursor(row_factory=class_row(_Lost))
        .execute(
            "SELECT g.allocation_id, g.experiment_id, g.uuids, g.tensorboards, g.globs,"
            " j.id AS job_id,"
            " j.resource_pool"
            " FROM checkpoint_gc g JOIN allocations a ON a.id = g.allocation_id"
            " JOIN jobs j ON j.experiment_id = g.experiment_id"
            " WHERE a.state = %s AND a.exit_reason = %s FOR UPDATE OF g SKIP LOCKED",
            (states.TERMINATED, containers.AGENT_LOST),
        )
        .fetchall()
    )
    for r in rows:
        eid = r.experiment_id
        # The lost run's record goes: it is handled once, and its event stays.
        conn.execute("DELETE FROM checkpoint_gc WHERE allocation_id = %s", (r.allocation_id,))
        lost = db.one_int(
            conn,
            "SELECT count(*) AS n FROM allocations WHERE task_id = %s AND exit_reason = %s",
            (f"gc.{eid}", containers.AGENT_LOST),
        )
        left = [
            str(u)
            for u in db.column(
                conn,
                uuid.UUID,
                "SELECT uuid FROM checkpoints WHERE uuid = ANY(%s::uuid[]) AND state = ANY(%s)",
                (r.uuids, states.sources("checkpoint", DELETED)),
            )
        ]
        if not left and not r.tensorboards:
            continue
        if lost > MAX_LOST_RUNS:
            states.record_event(
                conn,
                "experiment",
                eid,
                "checkpoint-gc-failed",
                f"checkpoint GC lost its agent {lost} times;"
                f" {_what(len(left), r.tensorboards)} are kept (det checkpoint delete or"
                " det experiment delete-tb-files asks again)",
            )
            continue
        target = _Target(eid, r.job_id, r.resource_pool)
        _queue_task(conn, st, target, left, run=1, tensorboards=r.tensorboards, globs=r.globs)


def _queue(
    conn: Conn,
    st: MasterState,
    target: _Target,
    config: JSONObject,
    *,
    run: int,
    policy: Retention,
    tensorboards: bool = False,
) -> None:
    eid = target.id
    registered = {
        str(u)
        for u in db.column(
            conn,
            uuid.UUID,
            "SELECT v.checkpoint_uuid FROM model_versions v JOIN checkpoints c"
            " ON c.uuid = v.checkpoint_uuid JOIN trials t ON t.id = c.trial_id"
            " WHERE t.experiment_id = %s",
            (eid,),
        )
    }
    # Checkpoints registered as model versions are always kept, as in Determined.
    doomed = [
        u
        for u in to_delete(candidates(conn, eid, _metric(eid, config)), policy)
        if u not in registered
    ]
    if not doomed:
        # Nothing to delete, no GC task: a deleted experiment without checkpoints keeps any
        # TensorBoard files its trials wrote (delete-tb-files before deleting removes them).
        return
    _queue_task(conn, st, target, doomed, run=run, tensorboards=tensorboards)


def _queue_task(
    conn: Conn,
    st: MasterState,
    target: _Target,
    doomed: list[str],
    *,
    run: int,
    tensorboards: bool = False,
    globs: list[str] | None = None,
) -> None:
    eid = target.id
    task_id = f"gc.{eid}"
    # A changed GC policy (``det e set gc-policy``) collects again: a fresh allocation each time.
    earlier = db.one_int(
        conn, "SELECT count(*) AS n FROM allocations WHERE task_id = %s", (task_id,)
    )
    allocation_id = f"{task_id}.{max(run, earlier + 1)}"
    allocation_rows.queue(
        conn,
        st,
        kind=TASK_TYPE,
        allocation_id=allocation_id,
        task_id=task_id,
        job_id=target.job_id,
        resource_pool=target.resource_pool,
        slots=0,
    )
    conn.execute(
        "INSERT INTO checkpoint_gc (allocation_id, experiment_id, uuids, tensorboards, globs)"
        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (allocation_id, eid, doomed, tensorboards, globs),
    )
    what = _what(len(doomed), tensorboards, globs)
    states.record_event(conn, "experiment", eid, "checkpoint-gc", f"deleting {what}")
    logger.info("experiment %d: checkpoint GC of %s queued", eid, what)


def _what(checkpoints: int, tensorboards: bool, globs: list[str] | None = None) -> str:
    if globs is not None:
        named = ", ".join(globs) if globs else "none: their files are listed again"
        return f"files of {checkpoints} checkpoints (globs: {named})"
    if not tensorboards:
        return f"{checkpoints} checkpoints"
    if not checkpoints:
        return "the TensorBoard files"
    return f"{checkpoints} checkpoints and the TensorBoard files"


def delete_tensorboards(conn: Conn, st: MasterState, experiment_id: int) -> None:
    """``det experiment delete-tb-files``: the experiment's GC task deletes its TensorBoard
    files from its checkpoint storage (its checkpoints stay). Refused while it runs: its
    trials would write new ones."""
    row = db.fetch_row(
        conn,
        _Deleting,
        "SELECT e.id, e.state, j.id AS job_id, j.resource_pool FROM experiments e"
        " JOIN jobs j ON j.experiment_id = e.id WHERE e.id = %s AND NOT e.deleted"
        " FOR NO KEY UPDATE OF e",
        (experiment_id,),
    )
    if row is None:
        raise NotFound(f"experiment {experiment_id} not found")
    if row.state not in states.TERMINAL:
        raise Conflict(
            f"experiment {experiment_id} is {row.state}; delete its TensorBoard files once"
            " it has ended"
        )
    target = _Target(row.id, row.job_id, row.resource_pool)
    _queue_task(conn, st, target, [], run=1, tensorboards=True)
    conn.execute("NOTIFY det_wakeup")


def delete(conn: Conn, st: MasterState, uuids: list[str], globs: list[str] | None = None) -> None:
    """``det checkpoint delete``: the GC task of each checkpoint's experiment deletes the given
    checkpoints from storage; they are marked ``DELETED`` when it succeeds. Checkpoints
    registered as model versions, already deleted or of a running experiment are refused.

    With ``globs`` (``det checkpoint rm``, CheckpointsRemoveFiles) the task removes only the
    files they name and reports what is left of each (PATCH ``/api/v1/checkpoints``): all gone
    is ``DELETED``, fewer files ``PARTIALLY_DELETED``; no globs: the files are read again."""
    verb = "delete" if globs is None else "remove files from"
    rows = (
        conn.cursor(row_factory=class_row(_Deletable))
        .execute(
            "SELECT c.uuid, c.state, t.experiment_id, e.state AS exp_state,"
            " j.id AS job_id, j.resource_pool,"
            " EXISTS (SELECT 1 FROM model_versions v WHERE v.checkpoint_uuid = c.uuid) AS registered"
            " FROM checkpoints c JOIN trials t ON t.id = c.trial_id"
            " JOIN experiments e ON e.id = t.experiment_id JOIN jobs j ON j.experiment_id = e.id"
            " WHERE c.uuid = ANY(%s::uuid[]) FOR NO KEY UPDATE OF e",
            (uuids,),
        )
        .fetchall()
    )
    by_uuid = {str(r.uuid): r for r in rows}
    by_experiment: dict[int, list[str]] = {}
    for uid in uuids:
        r = by_uuid.get(uid)
        if r is None:
            raise InvalidArgument(f"checkpointUuids: checkpoint {uid} has no trial to {verb}")
        if r.registered:
            raise Conflict(f"checkpoint {uid} is registered as a model version; it is kept")
        if r.state not in (states.COMPLETED, states.PARTIALLY_DELETED):
            raise Conflict(f"checkpoint {uid} is {r.state}; only a completed one is changed")
        if r.exp_state not in states.TERMINAL:
            raise Conflict(
                f"checkpoint {uid}: experiment {r.experiment_id} is {r.exp_state};"
                f" {verb} its checkpoints once it has ended"
            )
        by_experiment.setdefault(r.experiment_id, []).append(uid)
    for eid, doomed in by_experiment.items():
        r = by_uuid[doomed[0]]
        _queue_task(conn, st, _Target(eid, r.job_id, r.resource_pool), doomed, run=1, globs=globs)
    conn.execute("NOTIFY det_wakeup")


def container_spec(conn: Conn, st: MasterState, alloc: Allocation, agent_id: str) -> ContainerSpec:
    """The GC task's container: the experiment's storage and mounts, no context, and the pool's
    ``task_container_defaults.checkpoint_gc_image`` (else the experiment's image)."""
    row = (
        conn.cursor(row_factory=class_row(_Spec))
        .execute(
            "SELECT g.experiment_id, g.uuids, g.tensorboards, g.globs, e.config"
            " FROM checkpoint_gc g JOIN experiments e ON e.id = g.experiment_id"
            " WHERE g.allocation_id = %s",
            (alloc.id,),
        )
        .fetchone()
    )
    assert row is not None, f"GC allocation {alloc.id} has no checkpoint_gc row"
    config = row.config
    image, env = containers.image_and_env(conn, config, agent_id)
    env.update(containers.task_env(st, alloc.id, alloc.task_id, TASK_TYPE))
    env.update(
        {
            "DET_EXPERIMENT_ID": str(row.experiment_id),
            "DET_CHECKPOINT_STORAGE": json.dumps(config.get("checkpoint_storage") or {}),
            "DET_DELETE_CHECKPOINTS": json.dumps([str(u) for u in row.uuids]),
        }
    )
    if row.tensorboards:
        env["DET_DELETE_TENSORBOARDS"] = "1"
    if row.globs is not None:
        env["DET_CHECKPOINT_GLOBS"] = json.dumps(list(row.globs))
    # the experiment's Docker settings: its registry credentials pull the same image
    docker = containers.docker_options(
        st, config, alloc.resource_pool, admin=containers.owner_is_admin(conn, alloc.id)
    )
    gc_image = st.config.task_container_defaults_for(alloc.resource_pool).get("checkpoint_gc_image")
    if gc_image:
        image = str(gc_image)
        pull = gc_image_pull(st.config, alloc.resource_pool, image)
        docker["forcePull"], docker["registryAuth"] = pull["forcePull"], pull["registryAuth"]
    return {
        "taskId": alloc.task_id,
        "taskType": TASK_TYPE,
        "image": image,
        "command": ["python3", "-m", "det.exec.gc_checkpoints"],
        "env": env,
        "slotIds": [],
        "deviceType": "cpu",
        **docker,
        "user": containers.run_as(conn, alloc.id, env),
        "contextPath": None,
        "workdir": containers.WORKDIR,
        "killGraceSeconds": 30,
        "proxyPort": None,
    }


def gc_image_pull(config: MasterConfig, pool: str, image: str) -> GcImagePull:
    """How the cluster's GC ``image`` is pulled: with the pool's ``task_container_defaults``
    (``force_pull_image``, and ``registry_auth`` only when it is for the image's registry;
    otherwise none, and an agent on a cloud pulls from its cloud's registry with its role). An
    experiment's registry credentials are for its own image: never sent to another registry."""
    tcd = config.task_container_defaults_for(pool)
    auth = tcd.get("registry_auth")
    mine = (
        {k: str(v) for k, v in auth.items() if v}
        if isinstance(auth, dict) and _server(auth.get("serveraddress")) == _registry(image)
        else {}
    )
    return {"forcePull": bool(tcd.get("force_pull_image")), "registryAuth": mine or None}


_DOCKER_HUB = {"docker.io", "index.docker.io", "registry-1.docker.io"}


def _registry(image: str) -> str:
    """The registry host of ``image`` as Docker reads it (Docker Hub: ``docker.io``)."""
    first, sep, _ = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return "docker.io" if first in _DOCKER_HUB else first
    return "docker.io"


def _server(address: object) -> str:
    """The registry host a ``registry_auth`` with this ``serveraddress`` is for (none: Docker
    Hub)."""
    host = str(address or "docker.io").split("://", 1)[-1].split("/", 1)[0]
    return "docker.io" if host in _DOCKER_HUB else host


def on_terminated(conn: Conn, alloc: Allocation, exit_code: int | None, reason: str) -> None:
    """A GC task's allocation ended (``alloc``: its row as it was, locked by the caller)."""
    row = (
        conn.cursor(row_factory=class_row(_Run))
        .execute(
            "SELECT experiment_id, uuids, tensorboards, globs FROM checkpoint_gc"
            " WHERE allocation_id = %s",
            (alloc.id,),
        )
        .fetchone()
    )
    if row is None:
        return
    eid = row.experiment_id
    if exit_code == 0:
        # A removal of files reported what is left of each checkpoint as it went.
        if row.uuids and row.globs is None:
            states.checkpoints_deleted(conn, row.uuids)
        verb = "deleted" if row.globs is None else "removed"
        what = _what(len(row.uuids), row.tensorboards, row.globs)
        states.record_event(conn, "experiment", eid, "checkpoint-gc", f"{verb} {what}")
        return
    if reason == containers.AGENT_LOST:  # it may not have run: _requeue_lost queues it again
        states.record_event(
            conn,
            "experiment",
            eid,
            "checkpoint-gc",
            "checkpoint GC interrupted: its agent was lost; it is queued again",
        )
    else:
        states.record_event(
            conn,
            "experiment",
            eid,
            "checkpoint-gc-failed",
            f"checkpoint GC exited with {exit_code}; the checkpoints are kept (see the task's logs)",
        )


_POLICY_FIELDS = {
    "saveExperimentBest": "save_experiment_best",
    "saveTrialBest": "save_trial_best",
    "saveTrialLatest": "save_trial_latest",
}


def set_policy(conn: Conn, experiment_id: int, storage: object) -> None:
    """``det e set gc-policy`` (PATCH ``checkpointStorage``): the experiment's
    checkpoint_storage save_* change and its checkpoints are collected again under the new
    policy, now if it has ended, else when it ends. Deleted checkpoints stay deleted."""
    if not isinstance(storage, dict):
        raise InvalidArgument("checkpointStorage: must be an object")
    changes: dict[str, int] = {}
    for wire, key in _POLICY_FIELDS.items():
        value = storage.get(wire)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgument(
                f"checkpointStorage.{wire}: must be a non-negative integer (got {value!r})"
            )
        changes[key] = value
    if not changes:
        return
    conn.execute(
        "UPDATE experiments SET config = jsonb_set(config, '{checkpoint_storage}',"
        " coalesce(config->'checkpoint_storage', '{}'::jsonb) || %s::jsonb),"
        " checkpoint_gc_at = NULL WHERE id = %s",
        (json.dumps(changes), experiment_id),
    )
    states.record_event(
        conn, "experiment", experiment_id, "gc-policy", f"checkpoint GC policy set to {changes}"
    )
    conn.execute("NOTIFY det_wakeup")
