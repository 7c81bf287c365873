"""The official ``determined==0.38.1`` client in a virtual environment of its own.

Its ``det`` command would clash with ours, so it never goes into the project's environment. The
venv is built once under ``$DET_OFFICIAL_VENV`` (default: ``.cache/determined-0.38.1`` in the
repository) and reused. If the package cannot be installed, the caller fails: a compatibility
test must never pass by not running.
"""

from __future__ import annotations

import fcntl
import importlib.util
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
        result = subprocess.run(_install_argv(bin_dir), capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"cannot install determined=={VERSION}: {result.stderr[-2000:]}")
        marker.write_text(VERSION)
    return bin_dir


def _install_argv(bin_dir: Path) -> list[str]:
    """uv when the tests' venv has it (scripts/lib.sh installs with it: 4 s here against
    pip's 18, the same packages), given the machine's pip configuration; else pip."""
    requirement = f"determined=={VERSION}"
    uv = Path(sys.executable).with_name("uv")
    if not uv.exists():
        return [str(bin_dir / "pip"), "install", "-q", requirement]
    spec = importlib.util.spec_from_file_location("uv_args", _REPO / "scripts" / "uv_args.py")
    assert spec is not None and spec.loader is not None
    uv_args = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(uv_args)
    argv: list[str] = uv_args.install_argv(str(uv), str(bin_dir / "python"), requirement)
    return argv


def official_pythonpath() -> str:
    """A ``PYTHONPATH`` entry that makes the official package importable in a subprocess
    (its venv's site-packages). Builds the venv if needed; raises if it cannot."""
    venv = ensure_official_venv().parent
    found = sorted((venv / "lib").glob("python3*/site-packages"))
    if not found:
        raise RuntimeError(f"no site-packages in {venv}")
    return str(found[0])
