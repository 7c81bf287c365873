"""The tests' ``det-master`` processes, forked from an interpreter that has already imported
the master.

A fresh ``python -m det.master`` spends about 0.5 CPU-seconds importing its 900 modules before it
reads its config; the suite starts some 400 short-lived masters, on two cores. So each pytest
process keeps one fork server (the standard library's ``multiprocessing`` "forkserver": a
single-threaded process that imported ``det.master.__main__`` once) and a master is a fork of it
that runs ``det.master``'s ``__main__`` as ``python -m det.master`` would: its own process, pid,
port, database connections, log file, environment and working directory; signals, exit codes
and ``atexit`` hooks as a fresh interpreter's. What a fork cannot show, a fresh interpreter's
imports, is what ``DET_TEST_MASTER_FORK=0`` (a fresh interpreter for every master) and the
tests that run the ``det-master`` command themselves (the embedded database, ``det deploy
local``, the serverless images) still cover.

:class:`ForkedProcess` answers the part of ``subprocess.Popen`` the tests use.
"""

from __future__ import annotations

import atexit
import io
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.process
import os
import runpy
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Protocol

#: What the fork server imports before it forks a master: det's master, then a module that
#: freezes the server's heap (tests/master_fork_heap.py). multiprocessing passes over a preload
#: that fails to import in silence; tests/unit/test_master_fork.py checks both took.
PRELOAD = ["det.master.__main__", "tests.master_fork_heap"]
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class MasterProcess(Protocol):
    """What the tests ask of a master's process (``subprocess.Popen`` has all of it)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


def forking() -> bool:
    return os.environ.get("DET_TEST_MASTER_FORK", "1") != "0"


_context: multiprocessing.context.ForkServerContext | None = None


def _forkserver() -> multiprocessing.context.ForkServerContext:
    global _context
    if _context is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        # The server is a ``python -c`` of its own, and Python 3.11's imports its preloads with
        # only its working directory for ``tests`` (it takes this process's sys.path later, for
        # its children): it is started from the repository's root, whatever directory a test
        # is in when it forks the process's first master.
        here = os.getcwd()
        os.chdir(_REPO)
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            os.chdir(here)
        _context = ctx
    return _context


class ForkedProcess:
    """A master forked by the fork server, with ``subprocess.Popen``'s ``poll``, ``wait``,
    ``send_signal``, ``terminate``, ``kill``, ``pid`` and ``returncode`` (negative: the signal
    that ended it)."""

    def __init__(self, process: multiprocessing.process.BaseProcess, argv: list[str]) -> None:
        self._process = process
        self.args = argv
        assert process.pid is not None
        self.pid: int = process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # as Popen: never signal a pid that may have been reused
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start(argv: Sequence[str], env: dict[str, str], log_path: str) -> MasterProcess:
    """``python -m det.master ARGV`` with ``env``, its output appended to ``log_path``; forked
    from the fork server unless ``DET_TEST_MASTER_FORK=0``."""
    if not forking():
        with open(log_path, "ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "det.master", *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
    # The log exists even if the child dies before it runs (multiprocessing re-imports the
    # parent's __main__ in it first, so a parent whose __main__ came from stdin cannot fork a
    # master; pytest, its xdist workers and the bench scripts can).
    with open(log_path, "ab"):
        pass
    # daemon: a master a test left running is stopped when its pytest process exits
    process = _forkserver().Process(
        target=_run_master, args=(list(argv), env, log_path, os.getcwd()), daemon=True
    )
    process.start()
    return ForkedProcess(process, ["det-master", *argv])


def _run_master(argv: list[str], env: dict[str, str], log_path: str, cwd: str) -> None:
    """In the forked child: become ``python -m det.master ARGV``."""
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    unbuffered = env.get("PYTHONUNBUFFERED", "") != ""
    sys.stdout = _text(1, unbuffered)
    sys.stderr = _text(2, True)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = ["det-master", *argv]
    try:
        runpy.run_module("det.master", run_name="__main__", alter_sys=True)
    finally:
        # multiprocessing ends its children with os._exit, which skips atexit hooks; a master's
        # (its embedded PostgreSQL's stop, for one) run as they do at a fresh interpreter's exit
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()


def _text(fd: int, unbuffered: bool) -> io.TextIOWrapper:
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(
        raw,
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
        write_through=unbuffered,
    )
