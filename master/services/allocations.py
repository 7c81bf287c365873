"""Allocations: one run of a trial (or of a task: checkpoint GC, ``services.ntsc``) on slots,
from PENDING to TERMINATED.

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

import json
import logging
import re
from typing import Any

from psycopg.types.json import Jsonb

from det.common.container_spec import ContainerSpec
from det.master import expconf, states
from det.master.db import Conn
from det.master.expconf import stored
from det.master.handles import MasterState
from det.master.services import checkpoint_gc, containers, ntsc, task_services
from det.master.services.users import token_digest

logger = logging.getLogger(__name__)


def create_for_trial(
    conn: Conn, st: MasterState, trial: dict[str, Any], experiment: dict[str, Any]
) -> str:
    """Queues the next run of ``trial``; returns the allocation id."""
    run_id = trial["run_id"] + 1
    allocation_id = f"{trial['task_id']}.{run_id}"
    job = conn.execute(
        "SELECT id, resource_pool FROM jobs WHERE experiment_id = %s", (experiment["id"],)
    ).fetchone()
    assert job is not None
    conn.execute(
        "INSERT INTO allocations (id, task_id, trial_id, job_id, resource_pool, slots_needed, state, token_hash)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
        (
            allocation_id,
            trial["task_id"],
            trial["id"],
            job["id"],
            job["resource_pool"],
            stored.experiment_config(
                experiment["id"], experiment["config"]
            ).resources.slots_per_trial,
            states.PENDING,
            token_digest(containers.allocation_token(st, allocation_id)),
        ),
    )
    conn.execute("UPDATE trials SET run_id = %s WHERE id = %s", (run_id, trial["id"]))
    states.record_event(conn, "trial", trial["id"], "queued", f"allocation {allocation_id} queued")
    return allocation_id


def on_terminated(conn: Conn, allocation_id: str, exit_code: int | None, reason: str) -> None:
    """Ends an allocation (idempotent) and moves its trial on, following the module's table."""
    alloc = conn.execute(
        "SELECT * FROM allocations WHERE id = %s FOR NO KEY UPDATE", (allocation_id,)
    ).fetchone()
    if alloc is None or alloc["state"] == states.TERMINATED:
        return
    conn.execute(
        "UPDATE allocations SET exit_code = %s, exit_reason = coalesce(exit_reason, %s) WHERE id = %s",
        (exit_code, reason, allocation_id),
    )
    states.transition(conn, "allocation", allocation_id, states.TERMINATED, reason, strict=False)
    if reason.startswith((containers.IMAGE_PULL_FAILED, containers.START_FAILED)):
        # The container never ran, so it left no log of its own: the reason is the task's log.
        conn.execute(
            "INSERT INTO task_logs (task_id, allocation_id, agent_id, log, level, stdtype, source)"
            " VALUES (%s, %s, %s, %s, 'ERROR', 'stderr', 'master')",
            (
                alloc["task_id"],
                allocation_id,
                next(iter(alloc["placement"] or {}), None),
                reason + "\n",
            ),
        )
    if alloc["trial_id"] is None:
        if ntsc.owns(conn, alloc["task_id"]):
            ntsc.on_terminated(conn, alloc, exit_code, reason)
        else:
            checkpoint_gc.on_terminated(conn, allocation_id, exit_code, reason)
        return
    trial = conn.execute(
        "SELECT t.*, e.state AS exp_state, e.config FROM trials t JOIN experiments e ON e.id = t.experiment_id"
        " WHERE t.id = %s FOR NO KEY UPDATE OF t",
        (alloc["trial_id"],),
    ).fetchone()
    assert trial is not None
    if trial["state"] in states.TERMINAL:
        return
    tid = trial["id"]
    stop = trial["stop_reason"]
    preempted = alloc["preempt_requested"] or reason == containers.AGENT_LOST
    counts = False
    if alloc["kill_requested"] or stop == "killed":
        finish_trial(conn, trial, states.CANCELED, "killed")
    elif exit_code == 0 or (preempted and stop is not None):
        if stop == "searcher":
            finish_trial(conn, trial, states.COMPLETED, "stopped by the searcher")
        elif stop == "canceled":
            finish_trial(conn, trial, states.CANCELED, "experiment canceled")
        elif trial["state"] == states.PAUSED or preempted:
            logger.info("trial %d preempted (%s); it will resume", tid, reason)
        else:
            finish_trial(conn, trial, states.COMPLETED, "training finished")
    elif preempted:
        logger.info("trial %d lost its allocation (%s); re-queued without a restart", tid, reason)
    elif image_refused(reason):
        # The registry refused the image (unknown, denied, bad credentials): every retry would
        # be refused the same way, so the trial ends now instead of spending its restarts.
        finish_trial(conn, trial, states.ERROR, reason)
    else:
        counts = True
        restarts = trial["restarts"] + 1
        max_restarts = stored.experiment_config(
            trial["experiment_id"], trial["config"]
        ).max_restarts
        conn.execute("UPDATE trials SET restarts = %s WHERE id = %s", (restarts, tid))
        if restarts > max_restarts:
            finish_trial(
                conn, trial, states.ERROR, f"exit code {exit_code}; {restarts - 1} restarts used"
            )
        else:
            states.record_event(
                conn,
                "trial",
                tid,
                "restart",
                f"exit code {exit_code}: restart {restarts} of {max_restarts}",
            )
    conn.execute(
        "UPDATE allocations SET counts_as_restart = %s WHERE id = %s", (counts, allocation_id)
    )
    conn.execute("NOTIFY det_wakeup")


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


def finish_trial(conn: Conn, trial: dict[str, Any], state: str, reason: str) -> None:
    """Ends a trial and tells its searcher exactly once (the transition happens once)."""
    if states.transition(conn, "trial", trial["id"], state, reason, strict=False):
        if state == states.COMPLETED:
            kind, payload = "exited", {}
        else:
            kind = "early_exit"
            payload = {"reason": "ERRORED" if state == states.ERROR else "USER_CANCELED"}
        conn.execute(
            "INSERT INTO searcher_events (experiment_id, kind, request_id, payload) VALUES (%s, %s, %s, %s)",
            (trial["experiment_id"], kind, trial["request_id"], Jsonb(payload)),
        )


def update_container(conn: Conn, allocation_id: str, container: dict[str, Any]) -> None:
    """Applies a container state an agent reported (states only move forward)."""
    state = str(container.get("state") or "")
    if state not in states.ALLOCATION_ORDER or state == states.PENDING:
        return
    if state == states.TERMINATED:
        code = container.get("exitCode")
        reason = container.get("error") or f"container exited with code {code}"
        on_terminated(conn, allocation_id, code if isinstance(code, int) else -1, str(reason))
        return
    row = conn.execute("SELECT state FROM allocations WHERE id = %s", (allocation_id,)).fetchone()
    if row is None:
        return
    if isinstance(container.get("proxyPort"), int):  # an interactive task's service is up
        task_services.service_ready(conn, allocation_id, container["proxyPort"])
    if container.get("containerId"):
        conn.execute(
            "UPDATE allocations SET container_id = %s WHERE id = %s AND container_id IS DISTINCT FROM %s",
            (container["containerId"], allocation_id, container["containerId"]),
        )
    if states.ALLOCATION_ORDER.index(state) > states.ALLOCATION_ORDER.index(row["state"]):
        states.transition(
            conn, "allocation", allocation_id, state, "reported by agent", strict=False
        )
        if state == states.RUNNING:
            conn.execute(
                "UPDATE trials t SET started_at = coalesce(t.started_at, now()) FROM allocations a"
                " WHERE a.id = %s AND t.id = a.trial_id",
                (allocation_id,),
            )


def container_spec(
    conn: Conn, st: MasterState, alloc: dict[str, Any], agent_id: str
) -> ContainerSpec:
    """What the agent needs to start this allocation's container (see docs/internals.md)."""
    if alloc["trial_id"] is None:
        if ntsc.owns(conn, alloc["task_id"]):
            return ntsc.container_spec(conn, st, alloc, agent_id)
        return checkpoint_gc.container_spec(conn, st, alloc, agent_id)
    trial = conn.execute(
        "SELECT t.*, e.config, e.owner_id, u.username FROM trials t JOIN experiments e ON e.id = t.experiment_id"
        " JOIN users u ON u.id = e.owner_id WHERE t.id = %s",
        (alloc["trial_id"],),
    ).fetchone()
    assert trial is not None
    config: dict[str, Any] = trial["config"]
    slot_ids = [str(s) for s in (alloc["placement"] or {}).get(agent_id, [])]
    device = "cuda" if containers.slot_type(conn, agent_id) == "cuda" else "cpu"
    image, env = containers.image_and_env(conn, config, agent_id)
    env.update(containers.task_env(st, alloc, "TRIAL"))
    env.update(
        {
            "DET_USER": trial["username"],
            "DET_RESOURCES_TYPE": "docker-container",
            "DET_EXPERIMENT_ID": str(trial["experiment_id"]),
            "DET_TRIAL_ID": str(trial["id"]),
            "DET_TRIAL_RUN_ID": str(trial["run_id"]),
            "DET_TRIAL_SEED": str(trial["seed"]),
            "DET_HPARAMS": json.dumps(trial["hparams"]),
            "DET_EXPERIMENT_CONFIG": json.dumps(expconf.redact(config, storage=False)),
            "DET_STEPS_COMPLETED": str(trial["steps_completed"]),
            "DET_UNIQUE_PORT_OFFSET": str(containers.port_offset(alloc["id"])),
        }
    )
    if trial["latest_checkpoint"]:
        env["DET_LATEST_CHECKPOINT"] = str(trial["latest_checkpoint"])
    entrypoint = config.get("entrypoint") or "python3 train.py"
    command = ["python3", "-m", "det.exec.run", "--"]
    command += entrypoint if isinstance(entrypoint, list) else [entrypoint]
    return {
        "taskId": alloc["task_id"],
        "taskType": "TRIAL",
        "image": image,
        "command": command,
        "env": env,
        "slotIds": slot_ids,
        "deviceType": device,
        **containers.docker_options(st, config, alloc["resource_pool"]),
        "user": containers.run_as(conn, alloc["id"], env),
        "contextPath": f"/api/v1/tasks/{alloc['task_id']}/context",
        "workdir": containers.WORKDIR,
        "killGraceSeconds": 30,
        "proxyPort": None,
    }
