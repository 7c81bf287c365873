"""Start-up marks of a task process, for ``bench/launch.py``'s profile of a trial's first seconds.

With ``DET_STARTUP_PROFILE=1`` in the task's environment, :func:`mark` writes one line per step to
stderr (so it reaches the task's logs)::

    det-startup <unix time> <pid> <cpu seconds> <step>

(``<cpu seconds>``: the CPU time this process has used so far, user + system, all threads: on a
loaded machine the wall clock says how long a step waited for a core, the CPU time what it
cost), and :func:`mark_process_start` adds the moment the kernel started this process (from
``/proc/self/stat``, 10 ms resolution; CPU 0), so the interpreter's own start-up shows as the
gap to the next mark. Without the variable both are a dictionary lookup: nothing is written.
Standard library only, Python 3.8+ (the harness bundle runs on the image's python3).
"""

from __future__ import annotations

import os
import sys
import time

ENV = "DET_STARTUP_PROFILE"
PREFIX = "det-startup"
_started_marked = False


def enabled() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


def _write(when: float, cpu: float, step: str) -> None:
    try:
        sys.stderr.write(f"{PREFIX} {when:.6f} {os.getpid()} {cpu:.3f} {step}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed stderr must not break a task
        pass


def mark(step: str) -> None:
    """Record that ``step`` happened now (only with ``DET_STARTUP_PROFILE`` set)."""
    if enabled():
        _write(time.time(), time.process_time(), step)


def process_start_time() -> float | None:
    """When this process started (unix time), from ``/proc``; None where there is no ``/proc``."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22 (starttime); the split starts at field 3
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        # /proc/stat's btime is whole seconds: the boot moment from uptime keeps 10 ms.
        return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def mark_process_start() -> None:
    """Record ``process started`` at the kernel's start time of this process (once)."""
    global _started_marked
    if enabled() and not _started_marked:
        _started_marked = True
        started = process_start_time()
        if started is not None:
            _write(started, 0.0, "process started")
