"""Shared pieces of the autoscaling end-to-end tests (AWS on moto, GCP on FakeGce): the tiny
training script, experiment helpers and the Docker/image check."""

from __future__ import annotations

import base64
import json
from typing import Any

from tests import docker_support
from tests.docker_support import docker_client
from tests.integration.conftest import Master, wait_for

TASK_IMAGE = docker_support.TASK_IMAGE

# A Core API trial that takes ``steps * pause`` seconds, checkpoints when preempted and at
# the end, and resumes from its latest checkpoint.
TRAIN = """
import json, time
import det
from det import core

info = det.get_cluster_info()
hp = info.trial.hparams
with core.init() as ctx:
    step = 0
    if info.latest_checkpoint:
        with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:
            step = json.loads((path / "state.json").read_text())["step"]
        print(f"resumed from {info.latest_checkpoint} at step {step}", flush=True)
    while step < int(hp["steps"]):
        time.sleep(float(hp["pause"]))
        step += 1
        ctx.train.report_training_metrics(step, {"loss": 1.0 / step})
        if ctx.preempt.should_preempt():
            print(f"preempted at step {step}", flush=True)
            break
    with ctx.checkpoint.store_path({"steps_completed": step}) as (path, storage_id):
        (path / "state.json").write_text(json.dumps({"step": step}))
    if step >= int(hp["steps"]):
        ctx.train.report_validation_metrics(step, {"validation_loss": 1.0 / step})
"""


def docker_or_skip() -> Any:
    """A Docker client with the task image (skip only when there is no Docker engine)."""
    return docker_client(TASK_IMAGE)


def experiment_config(
    *,
    trials: int,
    steps: int,
    pause: float,
    pool: str,
    extra: str = "",
) -> str:
    return f"""
name: autoscale
entrypoint: python3 train.py
searcher: {{name: random, metric: validation_loss, max_trials: {trials}, max_concurrent_trials: {trials}}}
hyperparameters:
  steps: {steps}
  pause: {pause}
  lr: {{type: double, minval: 0.01, maxval: 1.0}}
resources: {{slots_per_trial: 1, resource_pool: {pool}}}
environment:
  image: {TASK_IMAGE}
max_restarts: 0
{extra}
"""


def create_experiment(master: Master, config: str) -> int:
    body = {
        "config": config,
        "modelDefinition": [
            {
                "path": "train.py",
                "type": 48,
                "content": base64.b64encode(TRAIN.encode()).decode(),
                "mode": 0o644,
            }
        ],
        "activate": True,
    }
    return int(master.post("/api/v1/experiments", body)["experiment"]["id"])


def experiment_state(master: Master, eid: int) -> str:
    return str(master.get(f"/api/v1/experiments/{eid}")["experiment"]["state"])


def trials(master: Master, eid: int) -> list[dict[str, Any]]:
    return list(master.get(f"/api/v1/experiments/{eid}/trials")["trials"])


def wait_completed(master: Master, eid: int, timeout: float = 240) -> None:
    def done() -> bool:
        state = experiment_state(master, eid)
        if state in ("STATE_ERROR", "STATE_CANCELED"):
            ts = trials(master, eid)
            logs = "\n".join(trial_log_text(master, t["id"])[-3000:] for t in ts)
            raise AssertionError(f"experiment {eid} ended {state}: {ts}\n{logs}")
        return state == "STATE_COMPLETED"

    wait_for(done, timeout, 0.5, f"experiment {eid} to complete")


def pool_events(master: Master, pool: str) -> list[dict[str, Any]]:
    return list(master.get(f"/api/v1/resource-pools/{pool}/events")["events"])


def pool_instances(master: Master, pool: str) -> list[dict[str, Any]]:
    return list(master.get(f"/api/v1/resource-pools/{pool}/instances")["instances"])


def cluster_id(master: Master) -> str:
    return str(master.get("/api/v1/master")["clusterId"])


def trial_log_lines(master: Master, trial_id: int) -> list[tuple[str, str]]:
    """``(agent id, line)`` of the trial's task logs (the NDJSON stream of its logs path)."""
    r = master.session().get(f"{master.url}/api/v1/trials/{trial_id}/logs", timeout=30)
    assert r.status_code == 200, r.text
    out = []
    for raw in r.text.splitlines():
        entry = json.loads(raw)["result"]
        out.append((str(entry.get("agentId") or ""), str(entry.get("message") or "")))
    return out


def trial_log_text(master: Master, trial_id: int) -> str:
    return "\n".join(line for _, line in trial_log_lines(master, trial_id))


def assert_resumed_elsewhere(master: Master, trial_id: int, first: str, second: str) -> None:
    """The trial checkpointed on ``first`` when preempted and resumed past step 0 on ``second``."""
    lines = trial_log_lines(master, trial_id)
    preempted = [agent for agent, line in lines if "preempted at step" in line]
    resumed = [(agent, line) for agent, line in lines if "resumed from" in line]
    assert preempted == [first], lines[-40:]
    assert len(resumed) == 1 and resumed[0][0] == second, lines[-40:]
    assert not resumed[0][1].rstrip().endswith(" at step 0"), resumed
