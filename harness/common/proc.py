"""Running a child process the way a task's PID 1 should: signals forwarded, exit code kept."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
#: Signals that ask a task to end: after one, the rest of the group gets time to finish.
TERMINATING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: How long the rest of a signalled group may run on after its leader exited (the agent's
#: default kill grace: Docker's SIGKILL comes then in any case).
GROUP_GRACE_SECONDS = 30.0


def _send(proc: subprocess.Popen[bytes], signum: int, group: bool) -> None:
    if proc.poll() is not None:
        return
    if group:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)


class _Forwarder:
    """What the block of :func:`_forwarding` gets: ``start(proc)`` hands it the child; ``asked_to_end``
    tells whether a terminating signal came (and was or will be forwarded)."""

    def __init__(self, start: Callable[[subprocess.Popen[bytes]], None], got: list[int]):
        self.start = start
        self._got = got

    @property
    def asked_to_end(self) -> bool:
        return any(sig in TERMINATING for sig in self._got)


@contextmanager
def _forwarding(group: bool) -> Iterator[_Forwarder]:
    """Catch the termination signals for the block; the block starts its child and passes it to
    ``start``: signals that came before are sent to the child then, later ones as they come. A
    signal that arrives while the child is being started is not lost (nor does it kill us and
    orphan the child)."""
    pending: list[int] = []
    got: list[int] = []
    child: list[subprocess.Popen[bytes]] = []

    def handler(signum: int, _frame: types.FrameType | None) -> None:
        got.append(signum)
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
        yield _Forwarder(started, got)
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


@contextmanager
def forward_signals(proc: subprocess.Popen[bytes], *, group: bool = False) -> Iterator[None]:
    """Forward termination signals we receive to ``proc`` while the block runs; with ``group``,
    to its whole process group (``proc`` must lead one: ``start_new_session=True``), so a
    training process under ``sh -c`` gets them too."""
    with _forwarding(group) as forwarder:
        forwarder.start(proc)
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
    those that arrive while it starts included; ``on_start(proc)`` is called once it runs.

    With ``group``, once a terminating signal came, we return only when the whole group has
    exited (or :data:`GROUP_GRACE_SECONDS` later, after a SIGKILL to what is left): under
    ``sh -c "train.py; …"`` the shell dies of the signal at once while the training process
    still saves its checkpoint, and a container's PID 1 that returned then would cut that off."""
    with _forwarding(group) as forwarder:
        proc: subprocess.Popen[bytes] = subprocess.Popen(  # type: ignore[call-overload]
            cmd, start_new_session=group, **popen_kwargs
        )
        forwarder.start(proc)
        if on_start is not None:
            on_start(proc)
        code = exit_code(proc.wait())
        if group and forwarder.asked_to_end:
            wait_for_group(proc.pid, GROUP_GRACE_SECONDS)
        return code


def group_members(pgid: int, proc_dir: str = "/proc") -> list[int] | None:
    """The live (not zombie) processes of process group ``pgid``, from ``/proc``; None where
    there is no ``/proc`` to read."""
    try:
        entries = os.listdir(proc_dir)
    except OSError:
        return None
    members = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc_dir, entry, "stat"), "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        # "pid (comm) state ppid pgrp …": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            members.append(int(entry))
    return members


def _group_alive(pgid: int) -> bool:
    members = group_members(pgid)
    if members is not None:
        return bool(members)
    try:  # no /proc: a zombie counts as alive here, so the grace may run out
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _reap_orphans() -> None:
    """As a container's PID 1, the group's orphans are our children once their parent died:
    collect the ones that exited (only PID 1 gets them: elsewhere we have no other child)."""
    if os.getpid() != 1:
        return
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def wait_for_group(pgid: int, grace: float, *, poll: float = 0.05) -> bool:
    """Wait until no process of group ``pgid`` lives; after ``grace`` seconds, SIGKILL the
    group. True if it ended by itself."""
    deadline = time.monotonic() + grace
    while True:
        _reap_orphans()
        if not _group_alive(pgid):
            return True
        if time.monotonic() >= deadline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            _reap_orphans()
            return False
        time.sleep(poll)
