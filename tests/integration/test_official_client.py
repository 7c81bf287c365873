"""The official determined 0.38.1 CLI drives a master started from this repository."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.compat.official import ensure_official_venv
from tests.integration.conftest import ADMIN_PASSWORD
from tests.integration.threaded import ThreadedMaster

pytestmark = pytest.mark.integration

CONFIG = """
name: official-client-compat
entrypoint: python3 train.py
searcher:
  name: single
  metric: validation_loss
hyperparameters:
  lr: 0.1
resources:
  slots_per_trial: 1
"""


@pytest.fixture(scope="module")
def official_bin() -> Path:
    return ensure_official_venv()


def run(
    official_bin: Path, master: ThreadedMaster, home: Path, *args: str, stdin: str | None = None
) -> str:
    env = {
        "PATH": f"{official_bin}:{os.environ['PATH']}",
        "HOME": str(home),
        "DET_MASTER": master.url,
    }
    result = subprocess.run(
        [str(official_bin / "det"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, (
        f"det {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    )
    return result.stdout


def test_official_cli_round_trip(
    official_bin: Path, threaded_master: ThreadedMaster, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "train.py").write_text("print('hello')\n")
    cfg = tmp_path / "const.yaml"
    cfg.write_text(CONFIG)

    def det(*args: str, stdin: str | None = None) -> str:
        return run(official_bin, threaded_master, home, *args, stdin=stdin)

    det("user", "login", "admin", stdin=ADMIN_PASSWORD + "\n")
    assert "admin" in det("user", "whoami")
    info = det("master", "info")
    assert "clusterId" in info or "cluster" in info.lower()

    out = det("experiment", "create", str(cfg), str(ctx), "--paused")
    exp_id = int(out.strip().split()[-1]) if out.strip().split()[-1].isdigit() else _created_id(out)
    listing = det("experiment", "list")
    assert "official-client-compat" in listing

    described = json.loads(det("experiment", "describe", str(exp_id), "--json"))
    exp: dict[str, Any] = described[0] if isinstance(described, list) else described
    assert "experiment" in exp or "id" in exp
    assert (
        threaded_master.get(f"/api/v1/experiments/{exp_id}")["experiment"]["state"]
        == "STATE_PAUSED"
    )

    det("experiment", "activate", str(exp_id))
    assert (
        threaded_master.get(f"/api/v1/experiments/{exp_id}")["experiment"]["state"]
        == "STATE_ACTIVE"
    )
    jobs = det("job", "list")
    job_id = threaded_master.get(f"/api/v1/experiments/{exp_id}")["experiment"]["jobId"]
    assert job_id[:8] in jobs or str(exp_id) in jobs
    det("job", "update", job_id, "--priority", "7")
    queue = threaded_master.get("/api/v1/job-queues")["jobs"]
    assert [j["priority"] for j in queue if j["jobId"] == job_id] == [7]

    det("experiment", "pause", str(exp_id))
    assert (
        threaded_master.get(f"/api/v1/experiments/{exp_id}")["experiment"]["state"]
        == "STATE_PAUSED"
    )

    det("experiment", "kill", str(exp_id))
    state = threaded_master.get(f"/api/v1/experiments/{exp_id}")["experiment"]["state"]
    assert state in ("STATE_STOPPING_KILLED", "STATE_CANCELED")

    det("user", "create", "newbie", "--password", "Newbie-pw-1")
    users = threaded_master.get("/api/v1/users")["users"]
    assert "newbie" in [u["username"] for u in users]


def _created_id(out: str) -> int:
    import re

    m = re.search(r"[Cc]reated experiment (\d+)", out)
    assert m, out
    return int(m.group(1))


def test_official_cli_sends_context_to_every_task_kind(
    official_bin: Path, threaded_master: ThreadedMaster, tmp_path: Path
) -> None:
    """The 0.38.1 CLI sends each ``--context`` file's ``mtime`` as a number (Determined's
    gateway takes an int64 as a number or a string): every task kind takes it."""
    home = tmp_path / "home"
    home.mkdir()
    ctx = tmp_path / "ctx"
    (ctx / "sub").mkdir(parents=True)
    (ctx / "sub" / "data.txt").write_text("context file\n")
    cfg = tmp_path / "const.yaml"
    cfg.write_text(CONFIG)

    def det(*args: str, stdin: str | None = None) -> str:
        return run(official_bin, threaded_master, home, *args, stdin=stdin)

    det("user", "login", "admin", stdin=ADMIN_PASSWORD + "\n")
    exp_id = _created_id(det("experiment", "create", str(cfg), str(ctx), "--paused"))
    launched = {
        "command": det("cmd", "run", "--detach", "--context", str(ctx), "cat sub/data.txt"),
        "shell": det("shell", "start", "--detach", "--context", str(ctx)),
        "notebook": det("notebook", "start", "--detach", "--no-browser", "--context", str(ctx)),
        "tensorboard": det(
            "tensorboard", "start", str(exp_id), "--detach", "--no-browser", "--context", str(ctx)
        ),
    }
    for kind, out in launched.items():
        task_id = out.strip().split()[-1]
        packed = threaded_master.get(f"/api/v1/tasks/{task_id}/context")["b64Tgz"]
        with tarfile.open(fileobj=io.BytesIO(base64.b64decode(packed))) as tar:
            data = tar.extractfile("sub/data.txt")
            assert data is not None and data.read() == b"context file\n", kind
