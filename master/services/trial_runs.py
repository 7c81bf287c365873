"""The trial kind: a trial's runs (its allocations), their container and what an ended run does
to the trial. Registered as ``TRIAL`` in :mod:`det.master.services.task_kinds`.

The rules for what a trial does when its allocation ends live in :func:`on_terminated`, in one
place:

==========================================  ==========================================
how the allocation ended                    what happens to the trial
==========================================  ==========================================
kill requested (user kill)                  CANCELED
exit 0, stop requested by the searcher      COMPLETED (it checkpointed on the signal)
exit 0, experiment canceled                 CANCELED
exit 0, paused                              stays PAUSED, resumes on activate
exit 0, preempted (scheduler / spot)        re-queued; no restart counted
exit 0 otherwise                            COMPLETED (it trained to its length)
non-zero after a preemption or agent loss   re-queued; no restart counted
image refused by the registry (see below)   ERROR at once; no restart counted
non-zero otherwise                          restarts += 1; ERROR past ``max_restarts``
==========================================  ==========================================

A container that never started because its image could not be pulled ends with the agent's one
line ``image pull failed: IMAGE: ANSWER``. When ANSWER is a refusal that a retry gets again (the
image or tag does not exist, access denied, wrong or missing credentials) the trial is ERROR at
once with that line as its reason, and its searcher is told, so a single-trial experiment ends
ERROR after one attempt and a search spends one attempt per trial, never ``max_restarts``. Other
pull failures (registry unreachable, timeouts, server errors, rate limits) may pass, so they count
as restarts like any failed run and stop at ``max_restarts``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import uuid

from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from det.common.container_spec import ContainerSpec
from det.common.jsontypes import JSONObject
from det.master import expconf, states
from det.master.db import Conn
from det.master.expconf import stored
from det.master.handles import MasterState
from det.master.services import allocation_rows, containers, rendezvous
from det.master.services.allocation_rows import Allocation

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class _Queued:
    """What queuing a trial's next run reads: the trial, its experiment's config and job."""

    id: int
    task_id: str
    run_id: int
    experiment_id: int
    config: JSONObject
    job_id: str
    resource_pool: str


def queue_run(conn: Conn, st: MasterState, trial_id: int) -> str:
    """Queues the next run of trial ``trial_id``; returns the allocation id."""
    trial = (
        conn.cursor(row_factory=class_row(_Queued))
        .execute(
            "SELECT t.id, t.task_id, t.run_id, t.experiment_id, e.config, j.id AS job_id,"
            " j.resource_pool FROM trials t JOIN experiments e ON e.id = t.experiment_id"
            " JOIN jobs j ON j.experiment_id = e.id WHERE t.id = %s",
            (trial_id,),
        )
        .fetchone()
    )
    assert trial is not None
    run_id = trial.run_id + 1
    allocation_id = f"{trial.task_id}.{run_id}"
    allocation_rows.queue(
        conn,
        st,
        kind="TRIAL",
        allocation_id=allocation_id,
        task_id=trial.task_id,
        trial_id=trial.id,
        job_id=trial.job_id,
        resource_pool=trial.resource_pool,
        slots=stored.experiment_config(trial.experiment_id, trial.config).resources.slots_per_trial,
    )
    conn.execute("UPDATE trials SET run_id = %s WHERE id = %s", (run_id, trial.id))
    states.record_event(conn, "trial", trial.id, "queued", f"allocation {allocation_id} queued")
    return allocation_id


@dataclasses.dataclass(frozen=True, slots=True)
class _Ending:
    """A trial whose run ended, as :func:`on_terminated` reads it (locked)."""

    id: int
    experiment_id: int
    state: str
    stop_reason: str | None
    restarts: int
    config: JSONObject


def on_terminated(conn: Conn, alloc: Allocation, exit_code: int | None, reason: str) -> None:
    """A run of a trial ended (``alloc``: its row as it was, locked by the caller): the trial
    moves on following the module's table."""
    trial = (
        conn.cursor(row_factory=class_row(_Ending))
        .execute(
            "SELECT t.id, t.experiment_id, t.state, t.stop_reason, t.restarts, e.config"
            " FROM trials t JOIN experiments e ON e.id = t.experiment_id"
            " WHERE t.id = %s FOR NO KEY UPDATE OF t",
            (alloc.trial_id,),
        )
        .fetchone()
    )
    assert trial is not None
    if trial.state in states.TERMINAL:
        return
    tid = trial.id
    stop = trial.stop_reason
    preempted = alloc.preempt_requested or reason == containers.AGENT_LOST
    counts = False
    if alloc.kill_requested or stop == "killed":
        finish_trial(conn, tid, states.CANCELED, "killed")
    elif exit_code == 0 or (preempted and stop is not None):
        if stop == "searcher":
            finish_trial(conn, tid, states.COMPLETED, "stopped by the searcher")
        elif stop == "canceled":
            finish_trial(conn, tid, states.CANCELED, "experiment canceled")
        elif trial.state == states.PAUSED or preempted:
            logger.info("trial %d preempted (%s); it will resume", tid, reason)
        else:
            finish_trial(conn, tid, states.COMPLETED, "training finished")
    elif preempted:
        logger.info("trial %d lost its allocation (%s); re-queued without a restart", tid, reason)
    elif image_refused(reason):
        # The registry refused the image (unknown, denied, bad credentials): every retry would
        # be refused the same way, so the trial ends now instead of spending its restarts.
        finish_trial(conn, tid, states.ERROR, reason)
    else:
        counts = True
        restarts = trial.restarts + 1
        max_restarts = stored.experiment_config(trial.experiment_id, trial.config).max_restarts
        conn.execute("UPDATE trials SET restarts = %s WHERE id = %s", (restarts, tid))
        if restarts > max_restarts:
            finish_trial(
                conn, tid, states.ERROR, f"exit code {exit_code}; {restarts - 1} restarts used"
            )
        else:
            states.record_event(
                conn,
                "trial",
                tid,
                "restart",
                f"exit code {exit_code}: restart {restarts} of {max_restarts}",
            )
    conn.execute("UPDATE allocations SET counts_as_restart = %s WHERE id = %s", (counts, alloc.id))
    conn.execute("NOTIFY det_wakeup")


#: What a report from a container other than the chief's is answered, and the trial's end.
LAUNCHER_HINT = (
    "each container trained on its own; run the entrypoint under a launcher, one chief for all"
    " slots: python3 -m determined.launch.torch_distributed -- python3 train.py (or"
    " det.launch.torch_distributed); a trial-class entrypoint (module:Class) gets one by itself"
)


def refuse_report_from_worker(conn: Conn, trial_id: int, allocation_id: str, rank: int) -> str:
    """A training report (metrics, a checkpoint, progress) came from container ``rank`` > 0 of
    the trial's run: that container believes it is the chief, so its training is not the
    chief's. Nothing it reported is kept: the trial ends ERROR at once (every retry would train
    twice again), its run is killed, and the reason is written to the trial's log. Returns the
    reason."""
    reason = (
        f"trial {trial_id}: a training report came from container {rank} of its run, not the"
        f" chief's (container 0): {LAUNCHER_HINT}"
    )
    first = conn.execute(
        "UPDATE allocations SET kill_requested = true, exit_reason = coalesce(exit_reason, %s)"
        " WHERE id = %s AND state <> 'TERMINATED' AND NOT kill_requested RETURNING id",
        (reason, allocation_id),
    ).fetchone()
    if first is None:  # refused before, or the run is ending anyway: nothing more to record
        return reason
    conn.execute(
        "INSERT INTO task_logs (task_id, allocation_id, log, level, stdtype, source)"
        " SELECT task_id, id, %s, 'ERROR', 'stderr', 'master' FROM allocations WHERE id = %s",
        (reason + "\n", allocation_id),
    )
    finish_trial(conn, trial_id, states.ERROR, reason)
    logger.warning("%s", reason)
    conn.execute("NOTIFY det_wakeup")
    return reason


# Answers of a registry (or the engine on its behalf) that do not change on retry. Anything else
# in a pull failure (timeouts, connection refused, 5xx, rate limits) counts as a restart.
_REFUSALS = re.compile(
    r"unauthorized|denied|forbidden|authentication required|no basic auth credentials"
    r"|not found|manifest unknown|name unknown|blob unknown|does not exist|invalid reference"
    r"|repository name must|no matching manifest|invalid tag|invalid reference format",
    re.IGNORECASE,
)


def image_refused(reason: str | None) -> bool:
    """Whether an allocation's end reason is a pull failure that retrying cannot fix."""
    if not reason or not reason.startswith(containers.IMAGE_PULL_FAILED):
        return False
    return bool(_REFUSALS.search(reason.removeprefix(containers.IMAGE_PULL_FAILED)))


def finish_trial(conn: Conn, trial_id: int, state: str, reason: str) -> None:
    """Ends trial ``trial_id`` and tells its searcher exactly once (the transition happens
    once)."""
    if states.transition(conn, "trial", trial_id, state, reason, strict=False):
        payload: JSONObject = {}
        if state == states.COMPLETED:
            kind = "exited"
        else:
            kind = "early_exit"
            payload = {"reason": "ERRORED" if state == states.ERROR else "USER_CANCELED"}
        conn.execute(
            "INSERT INTO searcher_events (experiment_id, kind, request_id, payload)"
            " SELECT experiment_id, %s, request_id, %s FROM trials WHERE id = %s",
            (kind, Jsonb(payload), trial_id),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class _Run:
    """A trial as its run's container needs it."""

    id: int
    experiment_id: int
    run_id: int
    seed: int
    hparams: JSONObject | None
    steps_completed: int
    latest_checkpoint: uuid.UUID | None
    config: JSONObject
    #: The experiment owner's (the task runs as that user).
    username: str


def container_spec(conn: Conn, st: MasterState, alloc: Allocation, agent_id: str) -> ContainerSpec:
    """What the agent needs to start this run's container (see docs/internals.md)."""
    trial = (
        conn.cursor(row_factory=class_row(_Run))
        .execute(
            "SELECT t.id, t.experiment_id, t.run_id, t.seed, t.hparams, t.steps_completed,"
            " t.latest_checkpoint, e.config, u.username FROM trials t"
            " JOIN experiments e ON e.id = t.experiment_id JOIN users u ON u.id = e.owner_id"
            " WHERE t.id = %s",
            (alloc.trial_id,),
        )
        .fetchone()
    )
    assert trial is not None
    config = trial.config
    slot_ids = [str(s) for s in (alloc.placement or {}).get(agent_id, [])]
    device = "cuda" if containers.slot_type(conn, agent_id) == "cuda" else "cpu"
    image, env = containers.image_and_env(conn, config, agent_id)
    env.update(containers.task_env(st, alloc.id, alloc.task_id, "TRIAL"))
    env.update(containers.owner_session_env(conn, st, alloc.id))
    env.update(
        {
            "DET_USER": trial.username,
            "DET_RESOURCES_TYPE": "docker-container",
            "DET_EXPERIMENT_ID": str(trial.experiment_id),
            "DET_TRIAL_ID": str(trial.id),
            "DET_TRIAL_RUN_ID": str(trial.run_id),
            "DET_TRIAL_SEED": str(trial.seed),
            "DET_HPARAMS": json.dumps(trial.hparams),
            "DET_EXPERIMENT_CONFIG": json.dumps(expconf.redact(config, storage=False)),
            "DET_STEPS_COMPLETED": str(trial.steps_completed),
            "DET_UNIQUE_PORT_OFFSET": str(containers.port_offset(alloc.id, alloc.port_offset)),
        }
    )
    if trial.latest_checkpoint:
        env["DET_LATEST_CHECKPOINT"] = str(trial.latest_checkpoint)
    # One container per agent of the gang: where the others are, which is the chief's.
    env.update(rendezvous.rendezvous_env(conn, alloc.placement, agent_id))
    rank = int(env["DET_CONTAINER_RANK"])
    env["DET_SESSION_TOKEN"] = rendezvous.container_token(env["DET_SESSION_TOKEN"], rank)
    entrypoint = (
        stored.experiment_config(trial.experiment_id, config).entrypoint or "python3 train.py"
    )
    command = ["python3", "-m", "det.exec.run", "--"]
    command += entrypoint if isinstance(entrypoint, list) else [entrypoint]
    return {
        "taskId": alloc.task_id,
        "taskType": "TRIAL",
        "image": image,
        "command": command,
        "env": env,
        "slotIds": slot_ids,
        "deviceType": device,
        **containers.docker_options(
            st, config, alloc.resource_pool, admin=containers.owner_is_admin(conn, alloc.id)
        ),
        "user": containers.run_as(conn, alloc.id, env),
        "contextPath": f"/api/v1/tasks/{alloc.task_id}/context",
        "workdir": containers.WORKDIR,
        "killGraceSeconds": 30,
        "proxyPort": None,
    }
