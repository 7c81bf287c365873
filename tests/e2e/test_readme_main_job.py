"""The README's first command, on a clean clone: a fresh cluster runs the example search to the end.

The clone gets its own state directory, master port, virtualenv and login store, so the test
never touches the user's own local cluster; the demo stops its cluster at the end.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.local_helpers import local_docker, local_state_dir  # noqa: F401 (fixture)
from tests.ports import free_port_pair

REPO = Path(__file__).resolve().parents[2]


def readme_commands(readme: str) -> list[str]:
    """The commands of the README's first ``bash`` block (comments and blank lines dropped)."""
    block = re.search(r"```bash\n(.*?)```", readme, re.S)
    assert block, "the README has no ```bash block"
    lines = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line]


def test_readme_starts_with_exactly_two_commands_demo_then_tests() -> None:
    commands = readme_commands((REPO / "README.md").read_text())
    assert len(commands) == 2, commands
    assert shlex.split(commands[0])[:2] == ["bash", "scripts/demo.sh"]
    ci = (REPO / ".ci" / "run").read_text()
    assert commands[1] in ci, "'.ci/run' must run the README's test command"


@pytest.mark.e2e
@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.usefixtures("local_docker")
@pytest.mark.timeout(2400)
def test_readme_main_job_runs_a_search_to_completion_on_a_clean_clone(tmp_path: Path) -> None:
    with local_state_dir() as state:
        _run_main_job(tmp_path, state)


def _run_main_job(tmp_path: Path, state: Path) -> None:
    # Beside the state, outside pytest's tmp tree: the clone's venv holds the embedded
    # PostgreSQL's binaries, which its own user must reach (local_state_dir says why).
    clone = state.parent / "det"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    first = readme_commands((clone / "README.md").read_text())[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DET_", "VIRTUAL_ENV"))}
    env.update(
        DET_LOCAL_STATE_DIR=str(state),
        DET_DEMO_PORT=str(free_port_pair()),
        DET_DEMO_DOWN="1",
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        PATH=":".join(p for p in env.get("PATH", "").split(":") if ".venv" not in p),
    )
    try:
        r = subprocess.run(
            ["bash", "-c", first], cwd=clone, env=env, capture_output=True, text=True, check=False
        )
    finally:
        # Whatever happened, nothing of this cluster keeps running.
        subprocess.run(
            [sys.executable, "-m", "det.cli", "deploy", "local", "down"],
            env=env,
            capture_output=True,
            check=False,
            timeout=180,
        )
    out = r.stdout
    assert r.returncode == 0, out[-4000:] + r.stderr[-4000:]
    summary = out[out.index("== best trial ==") :]
    assert re.search(r"experiment:\s+\d+ \(COMPLETED, \d+ trials\)", summary), summary
    trial = re.search(r"best trial:\s+(\d+)", summary)
    metric = re.search(r"best validation_loss: ([-+0-9.eE]+)", summary)
    uuid = re.search(
        r"checkpoint:\s+([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})", summary
    )
    assert trial and metric and uuid, summary
    assert re.search(r'hyperparameters: \{.*"learning_rate"', summary), summary
    assert 0.0 <= float(metric.group(1)) < 10.0
    # The best checkpoint is on the host, in the cluster's shared_fs storage.
    assert (state / "checkpoints" / uuid.group(1) / "metadata.json").is_file()
