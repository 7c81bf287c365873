"""The harness against a real master: the core_api example runs as real processes (through
``det.exec.run``) started by a simulated agent, so metrics, checkpoints, preemption and resume
cross the real REST API and land in PostgreSQL. The master is served on a real port by a thread
of the test's process with its control loop (``threaded_master``, tests/integration/threaded.py):
the harness is the process of its own here, and nothing checked needs a master process."""

from __future__ import annotations

import base64
import io
import os
import signal
import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest
import requests

from det.common import tarsafe
from tests.fakes.sim_agent import SimAgent, wait
from tests.integration.threaded import ThreadedMaster
from tests.private_run import PRIVATE_RUN, in_private_run
from tests.requires import NEEDS_TORCH

pytestmark = [
    pytest.mark.integration,
    NEEDS_TORCH,
]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "core_api"
FILES = ["train.py", "model.py", "startup-hook.sh"]

CONFIG = """
name: harness-live
entrypoint: python3 train.py
hyperparameters:
  learning_rate: 0.05
  hidden_size: 16
  report_every: 5
  validate_every: 20
  checkpoint_every: 20
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length: {batches: MAX}
max_restarts: 0
"""


def create(
    master: ThreadedMaster, max_batches: int, config: str = CONFIG, example: Path = EXAMPLE
) -> int:
    body = {
        "config": config.replace("MAX", str(max_batches)),
        "modelDefinition": [
            {
                "path": name,
                "type": 48,
                "content": base64.b64encode((example / name).read_bytes()).decode(),
                "mode": 0o644,
            }
            for name in FILES
            if (example / name).exists()
        ],
        "activate": True,
    }
    return int(master.post("/api/v1/experiments", body)["experiment"]["id"])


def process_runner(
    master: ThreadedMaster, tmp: Path, extra_env: dict[str, str] | None = None
) -> Any:
    """A SimAgent ``train`` callable that does what the real agent does, minus Docker."""
    venv_bin = str(Path(sys.executable).parent)

    def run(master_url: str, spec: dict[str, Any], killed: threading.Event) -> int:
        aid = spec["env"]["DET_ALLOCATION_ID"]
        workdir = tmp / f"work-{aid}"
        workdir.mkdir(parents=True)
        own_tmp = tmp / f"tmp-{aid}"  # a container's own /tmp (the trial's TensorBoard files)
        own_tmp.mkdir()
        r = requests.get(
            master_url + spec["contextPath"],
            headers={"Authorization": f"Bearer {master.agent_token}"},
            timeout=30,
        )
        r.raise_for_status()
        with tarfile.open(fileobj=io.BytesIO(base64.b64decode(r.json()["b64Tgz"]))) as tar:
            tarsafe.extract_all(tar, workdir)
        env = {
            **os.environ,
            **spec["env"],
            "DET_AGENT_ID": "sim-0",
            "DET_SLOT_IDS": "[" + ",".join(f'"{s}"' for s in spec.get("slotIds", ["0"])) + "]",
            "DET_WORKDIR": str(workdir),
            "DET_INFO_DIR": str(workdir / ".info"),
            "TMPDIR": str(own_tmp),
            "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
            **(extra_env or {}),
        }
        command = list(spec["command"])
        if env["DET_INFO_DIR"].startswith(PRIVATE_RUN + "/"):
            command = in_private_run(command)
        with (tmp / f"{aid}.log").open("w") as log:
            proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
            while proc.poll() is None:
                if killed.wait(0.2):
                    proc.send_signal(signal.SIGTERM)
                    break
            return proc.wait(timeout=60)

    return run


def activate(master: ThreadedMaster, eid: int) -> None:
    # No retry: activation racing the trial's own state change must not fail (one lock order).
    r = master.session().post(
        f"{master.url}/api/v1/experiments/{eid}/activate", json={}, timeout=30
    )
    assert r.status_code == 200, r.text


def trial_of(master: ThreadedMaster, eid: int) -> dict[str, Any]:
    ts = master.get(f"/api/v1/experiments/{eid}/trials")["trials"]
    return dict(ts[0]) if ts else {}


def training_steps(master: ThreadedMaster, trial_id: int) -> list[int]:
    metrics = master.get(f"/api/v1/trials/{trial_id}/metrics", params={"group": "training"})
    return [int(m["totalBatches"]) for m in metrics["metrics"]]


def checkpoints(master: ThreadedMaster, trial_id: int) -> list[dict[str, Any]]:
    return list(master.get(f"/api/v1/trials/{trial_id}/checkpoints")["checkpoints"])


def test_example_trial_reports_to_a_real_master(
    threaded_master: ThreadedMaster, tmp_path: Path
) -> None:
    agent = SimAgent(
        threaded_master.url,
        threaded_master.agent_token,
        "sim-0",
        train=process_runner(threaded_master, tmp_path),
    ).start()
    try:
        eid = create(threaded_master, 60)
        wait(
            lambda: (
                threaded_master.get(f"/api/v1/experiments/{eid}")["experiment"]["state"]
                == "STATE_COMPLETED"
            ),
            180,
            "experiment to complete",
        )
        t = trial_of(threaded_master, eid)
        # The default policy keeps the trial's latest and best checkpoints; the checkpoint GC
        # the completion queues runs on this agent and deletes the others (at least one of 3).
        wait(
            lambda: any(
                c["state"] == "STATE_DELETED" for c in checkpoints(threaded_master, t["id"])
            ),
            60,
            "the checkpoint GC",
        )
    finally:
        agent.stop()
    assert t["state"] == "STATE_COMPLETED"
    assert t["totalBatchesProcessed"] == 60
    assert training_steps(threaded_master, t["id"]) == list(range(5, 61, 5))
    ckpts = checkpoints(threaded_master, t["id"])
    assert [c["metadata"]["steps_completed"] for c in ckpts] == [20, 40, 60]
    assert ckpts[-1]["state"] == "STATE_COMPLETED"
    for c in ckpts:
        on_disk = (
            threaded_master.data_dir.parent / "checkpoints" / c["uuid"] / "model.pt"
        ).is_file()
        assert on_disk == (c["state"] == "STATE_COMPLETED"), c


@pytest.mark.slow
def test_pause_checkpoints_and_activate_resumes_where_it_stopped(
    threaded_master: ThreadedMaster, tmp_path: Path
) -> None:
    agent = SimAgent(
        threaded_master.url,
        threaded_master.agent_token,
        "sim-0",
        train=process_runner(threaded_master, tmp_path),
    ).start()
    try:
        eid = create(threaded_master, 2000)
        wait(
            lambda: (trial_of(threaded_master, eid).get("totalBatchesProcessed") or 0) >= 20,
            120,
            "progress",
        )
        threaded_master.post(f"/api/v1/experiments/{eid}/pause")
        wait(
            lambda: trial_of(threaded_master, eid).get("state") == "STATE_PAUSED",
            60,
            "trial paused",
        )
        paused_at = training_steps(threaded_master, trial_of(threaded_master, eid)["id"])[-1]
        assert paused_at < 2000
        activate(threaded_master, eid)
        wait(
            lambda: (
                threaded_master.get(f"/api/v1/experiments/{eid}")["experiment"]["state"]
                == "STATE_COMPLETED"
            ),
            300,
            "experiment to complete",
        )
    finally:
        agent.stop()
    t = trial_of(threaded_master, eid)
    assert t["restarts"] == 0
    assert training_steps(threaded_master, t["id"]) == list(range(5, 2001, 5))


OFFICIAL_CONFIG = """
name: official-live
entrypoint: python3 train.py
hyperparameters:
  max_steps: MAX
  report_every: 5
  validate_every: 10
  checkpoint_every: 10
searcher: {name: single, metric: validation_loss}
max_restarts: 0
# Not the cluster's shared_fs: off a container the official package would write to the mount
# point /determined_shared_fs on this host.
checkpoint_storage: {type: directory, container_path: CKPTS}
"""


def test_official_harness_reports_to_a_real_master(
    threaded_master: ThreadedMaster, tmp_path: Path
) -> None:
    """The official 0.38.1 package, unchanged, through our runner against our master (it reads
    its task info from the fixed official path)."""
    from tests.compat.official import official_pythonpath

    env = {"PYTHONPATH": official_pythonpath()}
    env["HOME"] = str(tmp_path)
    # The only place the official package looks; in a private /run (in_private_run).
    env["DET_INFO_DIR"] = "/run/determined/info"
    agent = SimAgent(
        threaded_master.url,
        threaded_master.agent_token,
        "sim-0",
        train=process_runner(threaded_master, tmp_path, env),
    ).start()
    try:
        config = OFFICIAL_CONFIG.replace("CKPTS", str(tmp_path / "ckpts"))
        eid = create(threaded_master, 20, config, EXAMPLE.parent / "official_client")
        wait(
            lambda: (
                threaded_master.get(f"/api/v1/experiments/{eid}")["experiment"]["state"]
                in ("STATE_COMPLETED", "STATE_ERROR")
            ),
            180,
            "experiment to finish",
        )
    finally:
        agent.stop()
    t = trial_of(threaded_master, eid)
    assert t["state"] == "STATE_COMPLETED"
    assert training_steps(threaded_master, t["id"]) == [5, 10, 15, 20]
    ckpts = threaded_master.get(f"/api/v1/trials/{t['id']}/checkpoints")["checkpoints"]
    assert [c["metadata"]["steps_completed"] for c in ckpts] == [10, 20]
    for c in ckpts:
        assert (tmp_path / "ckpts" / c["uuid"] / "model.pt").is_file()
