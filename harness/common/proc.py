"""Running a child process the way a task's PID 1 should: signals forwarded, exit code kept."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


@contextmanager
def forward_signals(proc: subprocess.Popen[bytes], *, group: bool = False) -> Iterator[None]:
    """Forward termination signals we receive to ``proc`` while the block runs; with ``group``,
    to its whole process group (``proc`` must lead one: ``start_new_session=True``), so a
    training process under ``sh -c`` gets them too."""

    def handler(signum: int, _frame: types.FrameType | None) -> None:
        if proc.poll() is not None:
            return
        if group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)

    previous: dict[signal.Signals, Any] = {}
    for sig in FORWARDED_SIGNALS:
        previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


def exit_code(returncode: int) -> int:
    """A child killed by signal N exits the way a shell reports it: 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def run_forwarding(cmd: list[str], *, group: bool = False, **popen_kwargs: object) -> int:
    """Run ``cmd`` to completion, forwarding signals (to its process group with ``group``)."""
    proc: subprocess.Popen[bytes] = subprocess.Popen(  # type: ignore[call-overload]
        cmd, start_new_session=group, **popen_kwargs
    )
    with forward_signals(proc, group=group):
        return exit_code(proc.wait())
