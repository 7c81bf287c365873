"""Background processes of a local cluster: start in their own session, find by pid file, stop.

A pid file alone is not trusted: a pid is only ours while ``/proc/<pid>/cmdline`` still names
the module we started (``det.master`` / ``det.agent``), so a reused pid is never signalled.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

# Children started by this process, kept so they are reaped (and never garbage-collected while
# running, which would warn): ``up`` then ``down`` in one Python, tests.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without ``DET_*``: those would override the generated configs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def start(argv: Sequence[str], log_path: Path, pid_path: Path, env: Mapping[str, str]) -> int:
    """Starts ``argv`` detached (own session, stdin closed, output appended to ``log_path``)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
            close_fds=True,
        )
    _CHILDREN[proc.pid] = proc
    pid_path.write_text(f"{proc.pid}\n")
    logger.info(
        "started %s (pid %d), log %s", argv[2] if len(argv) > 2 else argv[0], proc.pid, log_path
    )
    return proc.pid


def read_pid(pid_path: Path) -> int | None:
    try:
        return int(pid_path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _cmdline(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode(errors="replace")


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # The state field follows the parenthesised command name.
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def alive(pid: int | None, marker: str | None) -> bool:
    """True when ``pid`` runs and its command line contains ``marker``.

    ``marker=None`` only for a child this process just started: until it has exec'd, its command
    line is still ours.
    """
    if pid is None or pid <= 0:
        return False
    _reap(pid)
    cmd = _cmdline(pid)
    return cmd is not None and (marker is None or marker in cmd) and not _is_zombie(pid)


def running_pid(pid_path: Path, marker: str) -> int | None:
    pid = read_pid(pid_path)
    return pid if alive(pid, marker) else None


def _reap(pid: int) -> None:
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        del _CHILDREN[pid]


def wait_gone(pid: int, marker: str | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not alive(pid, marker):
            return True
        time.sleep(0.1)
    _reap(pid)
    return not alive(pid, marker)


def stop(pid: int, marker: str, grace: float = 20.0, sig: int = signal.SIGTERM) -> bool:
    """``sig`` (SIGTERM), wait ``grace`` seconds, then SIGKILL. True if it had to be killed."""
    if not alive(pid, marker):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    # Ours was checked above; from here on wait for the pid itself to go: an exiting process
    # loses its command line before it is gone.
    if wait_gone(pid, None, grace):
        return False
    logger.warning("pid %d did not stop within %.0f s: SIGKILL", pid, grace)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_gone(pid, None, 5.0)
    return True


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
