"""Stops a gang's container once the master has ended its allocation (issue 39).

When one machine of a gang dies or its agent does, the master ends the allocation (``agent
lost``) and tells the other agents to kill their containers. A container whose own agent is the
one that died is told nothing: its agent is gone, and its ranks wait for ever in a collective
with ranks that no longer exist. So ``det.exec.run``, the container's PID 1, asks the master
every :data:`INTERVAL_ENV` seconds (10 by default) whether the allocation still lives; the
master refuses an ended allocation's token (401: ``det.master.api._common._task_for_token``),
and that answer, and no other, stops the task: SIGTERM to the entrypoint's process group, then
SIGKILL after :data:`GRACE_SECONDS`. A master that answers anything else changes nothing, and
so does one that does not answer (running containers are never killed because the master
blinked), for a while: after :data:`FENCE_ENV` seconds without an answer (the agent sets it to
its own fence, a little less than the master's agent timeout: ``det.agent.reconcile``) the task
stops too. By then the master has given this container's agent up and runs the work again
elsewhere; the agent, if alive, has stopped the container itself, and this covers a machine
cut off whose agent is dead too.

Only containers of a trial spanning several containers are watched: a lone container has no
peer to wait for, and its agent, when it comes back, removes it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Callable, Mapping

from ..common.errors import MasterCallError, MasterStatusError

if TYPE_CHECKING:
    from ..common.api import Session

logger = logging.getLogger("det.exec.allocation_watch")

INTERVAL_ENV = "DET_ALLOCATION_WATCH_SECONDS"
#: Seconds without any answer from the master after which the task stops (unset or 0: never).
FENCE_ENV = "DET_ALLOCATION_FENCE_SECONDS"
DEFAULT_INTERVAL = 10.0
GRACE_SECONDS = 10.0

#: What one look found: the allocation ended (its token refused), the master answered
#: something else, or nothing usable came back (no connection, a timeout, a 5xx).
ENDED, ANSWERED, SILENT = "ended", "answered", "silent"


def interval(env: Mapping[str, str]) -> float | None:
    """How often to ask (None: not watched; a lone container, or no master to ask)."""
    if not env.get("DET_MASTER") or not env.get("DET_ALLOCATION_ID"):
        return None
    if not env.get("DET_SESSION_TOKEN"):
        return None
    try:
        if len(json.loads(env.get("DET_CONTAINER_ADDRS") or "[]")) < 2:
            return None
        seconds = float(env.get(INTERVAL_ENV) or DEFAULT_INTERVAL)
    except (TypeError, ValueError):
        return None
    return seconds if seconds > 0 else None


def fence_seconds(env: Mapping[str, str]) -> float | None:
    """How long the master may stay silent before the task stops (None: for ever)."""
    try:
        seconds = float(env.get(FENCE_ENV) or 0)
    except ValueError:
        return None
    return seconds if 0 < seconds < float("inf") else None


def look(session: Session, allocation_id: str) -> str:
    """:data:`ENDED` only when the master refuses this allocation's token; :data:`ANSWERED`
    for any other answer of the master's own (2xx, 4xx); :data:`SILENT` otherwise."""
    try:
        session.get(
            f"/api/v1/allocations/{allocation_id}/signals/preemption",
            params={"timeoutSeconds": 0},
            timeout=10,
        )
    except MasterStatusError as e:
        if e.status == 401:
            return ENDED
        return SILENT if e.status >= 500 else ANSWERED
    except MasterCallError:
        return SILENT
    return ANSWERED


def ended(session: Session, allocation_id: str) -> bool:
    """True only when the master refuses this allocation's token: it has ended."""
    return look(session, allocation_id) == ENDED


def stop(proc: subprocess.Popen[bytes], grace: float = GRACE_SECONDS) -> None:
    """SIGTERM to ``proc``'s process group, SIGKILL if it still runs ``grace`` seconds later."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        if wait is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=wait)


def watch(
    env: Mapping[str, str],
    proc: subprocess.Popen[bytes],
    *,
    session: Session | None = None,
    sleep: Callable[[float], None] = time.sleep,
    grace: float = GRACE_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> threading.Thread | None:
    """Starts the watch of ``proc`` (the leader of its process group) in a daemon thread."""
    seconds = interval(env)
    if seconds is None:
        return None
    allocation_id = env["DET_ALLOCATION_ID"]
    fence = fence_seconds(env)
    if session is None:
        # Imported here, in a gang's container only: the HTTP client (requests) stays out of
        # every task's first process until something asks the master (test_harness_startup).
        from ..common.api import Session

        session = Session(
            env["DET_MASTER"],
            allocation_token=env["DET_SESSION_TOKEN"],
            retry_seconds=0,
            wake_seconds=0,
        )

    def loop() -> None:
        heard = clock()
        while proc.poll() is None:
            sleep(seconds)
            if proc.poll() is not None:
                return
            found = look(session, allocation_id)
            if found == ANSWERED:
                heard = clock()
                continue
            if found == ENDED:
                why = f"the master ended allocation {allocation_id} (its token is refused)"
            elif fence is not None and clock() - heard >= fence:
                why = (
                    f"no answer from the master for {clock() - heard:.0f}s (fenced: it gives"
                    f" this container's agent up after its agent timeout)"
                )
            else:
                continue
            print(
                f"det.exec.run: {why}: stopping this container's processes",
                file=sys.stderr,
                flush=True,
            )
            stop(proc, grace)
            return

    thread = threading.Thread(target=loop, name="allocation-watch", daemon=True)
    thread.start()
    return thread
