"""Every example runs off-cluster (dummy contexts) with ``python3 train.py``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.requires import NEEDS_TORCH

pytestmark = NEEDS_TORCH

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def copy_example(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(
        EXAMPLES / name, dst, ignore=shutil.ignore_patterns("checkpoints", "__pycache__")
    )
    return dst


def own_tmp(tmp_path: Path) -> str:
    """A temporary directory of the test's own for a launcher's processes (torch's launcher
    makes a torchelastic_* directory there and never removes it)."""
    d = tmp_path / "tmp"
    d.mkdir(exist_ok=True)
    return str(d)


def checkpoint_steps(workdir: Path) -> list[int]:
    return sorted(
        json.loads((d / "metadata.json").read_text())["steps_completed"]
        for d in (workdir / "checkpoints").iterdir()
    )


def test_core_api_example_trains_and_checkpoints_locally(tmp_path: Path) -> None:
    work = copy_example("core_api", tmp_path)
    r = subprocess.run(
        [sys.executable, "train.py", "--max-steps", "120"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "validation metrics at 120" in r.stderr
    assert checkpoint_steps(work) == [100, 120]
    ckpt = next(
        d for d in (work / "checkpoints").iterdir() if "120" in (d / "metadata.json").read_text()
    )
    assert {p.name for p in ckpt.iterdir()} == {"model.pt", "state.json", "metadata.json"}


@pytest.mark.slow
def test_core_api_example_runs_distributed_off_cluster(tmp_path: Path) -> None:
    work = copy_example("core_api", tmp_path)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "det.launch.torch_distributed",
            "--",
            sys.executable,
            "train.py",
            "--max-steps",
            "60",
        ],
        cwd=work,
        env={**os.environ, "DET_SLOT_IDS": json.dumps(["0", "1"]), "TMPDIR": own_tmp(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[rank=0]" in r.stdout + r.stderr and "[rank=1]" in r.stdout + r.stderr
    assert checkpoint_steps(work) == [60]


def official_env() -> dict[str, str]:
    """The official ``determined`` package on the path of a subprocess: it lives in a venv of
    its own (in the dev venv its ``det`` script would shadow ours); built on first use, and a
    failure to install it fails the test rather than skipping it."""
    from tests.compat.official import official_pythonpath

    return {"PYTHONPATH": official_pythonpath()}


def test_official_client_example_runs_off_cluster(tmp_path: Path) -> None:
    env = official_env()
    work = copy_example("official_client", tmp_path)
    r = subprocess.run(
        [sys.executable, "train.py", "--max-steps", "20"],
        cwd=work,
        # The official dummy context stores checkpoints under the user's data dir.
        env={**os.environ, **env, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "steps_completed=20" in r.stderr
