"""Running a child process the way a task's PID 1 should: signals forwarded, exit code kept."""

from __future__ import annotations

import signal
import subprocess
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


@contextmanager
def forward_signals(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """Forward termination signals we receive to ``proc`` while the block runs."""

    def handler(signum: int, _frame: types.FrameType | None) -> None:
        if proc.poll() is None:
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


def run_forwarding(cmd: list[str], **popen_kwargs: object) -> int:
    proc: subprocess.Popen[bytes] = subprocess.Popen(cmd, **popen_kwargs)  # type: ignore[call-overload]
    with forward_signals(proc):
        return exit_code(proc.wait())
