"""The master image's two bases (infra/build-images.sh ``master``): Docker Hub's python:3.11-slim
(what ``up`` uses on a laptop) and the debootstrap base (a machine without Docker Hub), both
built for linux/amd64.

This machine has no Docker Hub, so the official base is checked here as far as the build's
arguments: the script runs in a copy of its folder with a recording ``docker`` and a stand-in
Python (no wheels are built or downloaded); the debootstrap build itself runs for real wherever
the serverless simulation builds det-master (tests/e2e/test_serverless_sim.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

_DOCKER = """#!/bin/bash
echo "$*" >> "$DOCKER_LOG"
case "$1 $2" in
  "info "*) exit 0 ;;
  "image inspect") [[ "$*" == *det-base:bookworm* ]] && exit 0; exit 1 ;;
esac
exit 0
"""

# The script's Python: `- DIR` (det's wheel, constraints and sha256 into DIR) and `-m pip ...`.
_PYTHON = """#!/bin/bash
if [[ "$1" == "-" ]]; then
  cat > /dev/null
  touch "$2/det_platform-0.1.0-py3-none-any.whl"
  echo "x==1" > "$2/constraints.txt"
  echo "0123456789abcdef" > "$2/sha256"
fi
exit 0
"""


def _build(tmp_path: Path, **env: str) -> list[str]:
    root = tmp_path / "repo"
    (root / "infra").mkdir(parents=True)
    shutil.copy(REPO / "infra" / "build-images.sh", root / "infra")
    shutil.copytree(REPO / "infra" / "master-image", root / "infra" / "master-image")
    shutil.copy(REPO / "pyproject.toml", root)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("docker", _DOCKER), ("python", _PYTHON)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "docker.log"
    done = subprocess.run(
        ["bash", str(root / "infra" / "build-images.sh"), "master"],
        env={
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "DOCKER_LOG": str(log),
            "PYTHON": str(bin_dir / "python"),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return [line for line in log.read_text().splitlines() if line.startswith("build ")]


def test_the_official_base_builds_for_amd64_from_python_slim(tmp_path):
    (build,) = _build(tmp_path, MASTER_BASE="official")
    assert "--platform linux/amd64" in build
    assert "BASE_IMAGE=python:3.11-slim" in build
    assert "-t det-master:0123456789ab" in build


def test_the_debootstrap_base_stays_the_scripts_default(tmp_path):
    if os.uname().machine != "x86_64":
        pytest.skip("debootstrap builds this machine's architecture")
    (build,) = _build(tmp_path)
    assert "--platform linux/amd64" in build and "BASE_IMAGE=det-base:bookworm" in build


def test_an_unknown_base_is_refused(tmp_path):
    with pytest.raises(AssertionError, match="MASTER_BASE must be debootstrap or official"):
        _build(tmp_path, MASTER_BASE="alpine")
