"""The official ``determined==0.38.1`` client in a virtual environment of its own.

Its ``det`` command would clash with ours, so it never goes into the project's environment. The
venv is built once under ``$DET_OFFICIAL_VENV`` (default: ``.cache/determined-0.38.1`` in the
repository) and reused. If the package cannot be installed, the caller fails: a compatibility
test must never pass by not running.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

VERSION = "0.38.1"
_REPO = Path(__file__).resolve().parents[2]


def venv_dir() -> Path:
    return Path(os.environ.get("DET_OFFICIAL_VENV") or _REPO / ".cache" / f"determined-{VERSION}")


def ensure_official_venv() -> Path:
    """Returns the venv's ``bin`` directory, creating the venv if needed (raises on failure).

    Test workers call this at the same time on a fresh checkout. Creation is serialised by an
    exclusive lock beside the venv, and the venv counts as built only once its marker exists:
    a second builder would rewrite files (shared libraries included) that a first worker is
    already running, which ends that worker's ``det`` with SIGBUS.
    """
    venv = venv_dir()
    bin_dir = venv / "bin"
    marker = venv / ".det-ok"
    if marker.exists():
        return bin_dir
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():  # another worker built it while this one waited
            return bin_dir
        shutil.rmtree(venv, ignore_errors=True)  # a half-built venv from an interrupted run
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        result = subprocess.run(
            [str(bin_dir / "pip"), "install", "-q", f"determined=={VERSION}"],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise RuntimeError(f"cannot install determined=={VERSION}: {result.stderr[-2000:]}")
        marker.write_text(VERSION)
    return bin_dir


def official_pythonpath() -> str:
    """A ``PYTHONPATH`` entry that makes the official package importable in a subprocess
    (its venv's site-packages). Builds the venv if needed; raises if it cannot."""
    venv = ensure_official_venv().parent
    found = sorted((venv / "lib").glob("python3*/site-packages"))
    if not found:
        raise RuntimeError(f"no site-packages in {venv}")
    return str(found[0])
