"""Running a child process the way a task's PID 1 should: signals forwarded, exit code kept."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def _send(proc: subprocess.Popen[bytes], signum: int, group: bool) -> None:
    if proc.poll() is not None:
        return
    if group:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)


@contextmanager
def _forwarding(group: bool) -> Iterator[Callable[[subprocess.Popen[bytes]], None]]:
    """Catch the termination signals for the block; the block starts its child and passes it to
    the callable it gets: signals that came before are sent to the child then, later ones as they
    come. A signal that arrives while the child is being started is not lost (nor does it kill
    us and orphan the child)."""
    pending: list[int] = []
    child: list[subprocess.Popen[bytes]] = []

    def handler(signum: int, _frame: types.FrameType | None) -> None:
        if child:
            _send(child[0], signum, group)
        else:
            pending.append(signum)

    def started(proc: subprocess.Popen[bytes]) -> None:
        child.append(proc)
        while pending:
            _send(proc, pending.pop(0), group)

    previous: dict[signal.Signals, Any] = {}
    for sig in FORWARDED_SIGNALS:
        previous[sig] = signal.signal(sig, handler)
    try:
        yield started
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


@contextmanager
def forward_signals(proc: subprocess.Popen[bytes], *, group: bool = False) -> Iterator[None]:
    """Forward termination signals we receive to ``proc`` while the block runs; with ``group``,
    to its whole process group (``proc`` must lead one: ``start_new_session=True``), so a
    training process under ``sh -c`` gets them too."""
    with _forwarding(group) as started:
        started(proc)
        yield


def exit_code(returncode: int) -> int:
    """A child killed by signal N exits the way a shell reports it: 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def run_forwarding(
    cmd: list[str],
    *,
    group: bool = False,
    on_start: Callable[[subprocess.Popen[bytes]], object] | None = None,
    **popen_kwargs: object,
) -> int:
    """Run ``cmd`` to completion, forwarding signals (to its process group with ``group``),
    those that arrive while it starts included; ``on_start(proc)`` is called once it runs."""
    with _forwarding(group) as started:
        proc: subprocess.Popen[bytes] = subprocess.Popen(  # type: ignore[call-overload]
            cmd, start_new_session=group, **popen_kwargs
        )
        started(proc)
        if on_start is not None:
            on_start(proc)
        return exit_code(proc.wait())
