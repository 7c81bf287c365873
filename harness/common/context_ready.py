"""The task context arriving after the container started (issue 29).

For a task whose command is ``python3 -m det.exec.run`` and whose container has the harness
bundle, the agent starts the container at once and copies the context in while the wrapper
starts (Docker's copy into a created container cost about 0.15 s of a container's 0.5 s). The
archive's last member is an empty *ready marker* named after the container (so no image can
carry it beforehand); Docker unpacks the members in order, so once the marker exists every file
of the context is in place, with its owner. The agent names the marker in ``DET_CONTEXT_READY``
and the wrapper waits for it before it reads the workdir or runs anything of the user's.

A copy that fails, or is cut short by a kill or an agent restart, never creates the marker: the
agent then kills the container with a clear error, and the wrapper, if nothing else stops it,
gives up after ``DET_CONTEXT_WAIT_SECONDS`` (default :data:`DEFAULT_WAIT_SECONDS`) with one
line, never running the user's code. Standard library only, Python 3.8+ (the harness bundle).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

ENV = "DET_CONTEXT_READY"
WAIT_ENV = "DET_CONTEXT_WAIT_SECONDS"
#: Long enough for a 95 MB context on a loaded agent; only a copy that died unnoticed waits it out.
DEFAULT_WAIT_SECONDS = 600.0
#: The marker's directory: the harness bundle's parent, which exists in every such container.
MARKER_DIR = "/run/det"
_POLL_SECONDS = 0.005


def marker_path(container_id: str) -> str:
    """Where the agent's archive puts the ready marker of container ``container_id`` (pure)."""
    safe = "".join(c for c in container_id if c.isalnum() or c in "-_")
    return f"{MARKER_DIR}/context-{safe}.ready"


def wait_seconds(env: dict[str, str]) -> float:
    """``DET_CONTEXT_WAIT_SECONDS``, else the default (a bad value: the default)."""
    try:
        value = float(env.get(WAIT_ENV, ""))
    except ValueError:
        return DEFAULT_WAIT_SECONDS
    return value if value > 0 else DEFAULT_WAIT_SECONDS


def wait_for(
    path: str,
    timeout: float,
    exists: Callable[[str], bool] = os.path.exists,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """Wait until ``path`` exists; None then, else why not (one line) after ``timeout`` s."""
    deadline = clock() + timeout
    while not exists(path):
        if clock() >= deadline:
            return (
                f"the task's context did not arrive within {timeout:g} s (ready marker {path}"
                " missing): the agent's copy failed or was cut short; the entrypoint was not run"
            )
        sleep(_POLL_SECONDS)
    return None
