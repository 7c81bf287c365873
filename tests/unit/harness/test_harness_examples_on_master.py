"""The core_api example as a trial: metrics, checkpoints, preemption and resume (stand-in master)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.private_run import in_private_run
from tests.requires import NEEDS_TORCH
from tests.unit.harness.fake_master import FakeMaster

pytestmark = NEEDS_TORCH

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "core_api"
HPARAMS = {"report_every": 5, "validate_every": 20, "checkpoint_every": 40}


def run_trial(
    master: FakeMaster, tmp_path: Path, entrypoint: str = "python3 train.py", **env: str
) -> subprocess.CompletedProcess[str]:
    work = tmp_path / "work"
    if not work.exists():
        shutil.copytree(EXAMPLE, work, ignore=shutil.ignore_patterns("checkpoints", "__pycache__"))
    config = {
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "ckpts")},
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 60}},
    }
    task_env = master.task_env(config=config, DET_HPARAMS=json.dumps(HPARAMS), **env)
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "det.exec.run", "--", entrypoint],
        env={
            **os.environ,
            **task_env,
            "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
            "DET_WORKDIR": str(work),
            "DET_INFO_DIR": str(tmp_path / "info"),
            # The trial's TensorBoard directory and torch's launcher's torchelastic_* directory
            # go to the temporary directory: the test's own.
            "TMPDIR": str(tmp),
        },
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_trial_reports_metrics_and_checkpoints(master: FakeMaster, tmp_path: Path) -> None:
    r = run_trial(master, tmp_path)
    assert r.returncode == 0, r.stderr
    metrics = master.metric_reports(11)
    training = [m for m in metrics if m["group"] == "training"]
    validation = [m for m in metrics if m["group"] == "validation"]
    assert [m["stepsCompleted"] for m in training] == list(range(5, 61, 5))
    assert [m["stepsCompleted"] for m in validation] == [20, 40, 60]
    assert validation[-1]["metrics"]["avgMetrics"]["batches"] == 60
    ckpts = [rec.body for rec in master.requests_to("/api/v1/checkpoints", method="POST")]
    assert [c["metadata"]["steps_completed"] for c in ckpts] == [40, 60]
    for c in ckpts:
        assert (tmp_path / "ckpts" / c["uuid"] / "model.pt").is_file()
        assert set(c["resources"]) == {"model.pt", "state.json", "metadata.json"}
    progress = master.requests_to("/trials/11/progress")
    assert progress[-1].body["progress"] == 1.0


@pytest.mark.slow
def test_distributed_trial_reports_once_from_the_chief(master: FakeMaster, tmp_path: Path) -> None:
    import random

    r = run_trial(
        master,
        tmp_path,
        "python3 -m det.launch.torch_distributed -- python3 train.py",
        DET_SLOT_IDS=json.dumps([0, 1]),
        DET_UNIQUE_PORT_OFFSET=str(random.randrange(1, 999)),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[rank=1]" in r.stdout + r.stderr
    training = [
        report["stepsCompleted"]
        for report in master.metric_reports(11)
        if report["group"] == "training"
    ]
    assert training == list(range(5, 61, 5))
    ckpts = [rec.body for rec in master.requests_to("/api/v1/checkpoints", method="POST")]
    assert [c["metadata"]["steps_completed"] for c in ckpts] == [40, 60]
    # Only the chief polls for preemption; workers get its answer by broadcast.
    polls = master.requests_to("/signals/preemption")
    assert [p.query["timeout_seconds"] for p in polls].count(["0"]) == 1
    assert len(master.requests_to("/api/v1/runs/start")) == 1


def test_preempted_trial_checkpoints_exits_zero_and_resumes(
    master: FakeMaster, tmp_path: Path
) -> None:
    master.set_preempt(True)
    r = run_trial(master, tmp_path)
    assert r.returncode == 0, r.stderr
    (ckpt,) = [rec.body for rec in master.requests_to("/api/v1/checkpoints", method="POST")]
    assert ckpt["metadata"]["steps_completed"] == 5
    assert len(master.requests_to("/signals/ack_preemption")) == 1

    master.set_preempt(False)
    master.state.records.clear()
    r = run_trial(master, tmp_path, DET_LATEST_CHECKPOINT=ckpt["uuid"], DET_STEPS_COMPLETED="5")
    assert r.returncode == 0, r.stderr
    steps = [
        report["stepsCompleted"]
        for report in master.metric_reports(11)
        if report["group"] == "training"
    ]
    assert steps[0] == 10 and steps[-1] == 60


def test_official_harness_runs_the_official_example_through_our_runner(
    master: FakeMaster, tmp_path: Path
) -> None:
    """The official 0.38.1 harness finds the task through the info files det.exec.run writes
    (at the official fixed path, so this runs only when the package is available)."""
    from tests.unit.harness.test_examples_offcluster import official_env

    env = official_env()
    work = tmp_path / "work"
    shutil.copytree(EXAMPLE.parent / "official_client", work)
    config = {
        "checkpoint_storage": {"type": "directory", "container_path": str(tmp_path / "ckpts")},
        "searcher": {"name": "single", "metric": "validation_loss"},
    }
    hparams = {"max_steps": 20, "report_every": 5, "validate_every": 10, "checkpoint_every": 10}
    task_env = master.task_env(config=config, DET_HPARAMS=json.dumps(hparams))
    # det.exec.run writes the info files at the official fixed path: in a private /run, since
    # on this host's they made an off-cluster official client in a parallel test believe it ran
    # on a cluster (CI: "DET_SESSION_TOKEN environment variable not set").
    r = subprocess.run(
        in_private_run([sys.executable, "-m", "det.exec.run", "--", f"{sys.executable} train.py"]),
        env={**os.environ, **env, **task_env, "DET_WORKDIR": str(work), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    ckpts = [rec.body for rec in master.requests_to("/api/v1/checkpoints", method="POST")]
    assert [c["metadata"]["steps_completed"] for c in ckpts] == [10, 20]
    validation = [
        rec.body
        for rec in master.requests_to("/api/v1/trials/11/metrics")
        if rec.body["group"] == "validation"
    ]
    assert validation[-1]["metrics"]["metrics"]["avgMetrics"]["batches"] == 20
