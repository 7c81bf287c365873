"""The official ``det`` command, run for the tests many times a second.

A fresh ``det`` spends about 0.3 CPU-seconds importing the ``determined`` package before it
reads its arguments, and the tests run it some 500 times (the conformance walk alone runs every
leaf of its tree). :class:`OfficialDet` keeps one fork server per client (the official venv's
Python running tests/compat/det_fork_server.py, started with the client's environment and
working directory, so that whatever the package reads at import it reads as a fresh ``det``
would) and runs each command in a fork of it: the official package's code unchanged, its own
process, stdin, stdout, stderr, exit code and ``atexit`` hooks. ``DET_TEST_OFFICIAL_FORK=0`` runs
every command as a fresh process instead, and the tests that run ``det`` for what only a fresh
process shows (its console script, a notebook opened in a browser) still do.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests import stall_clock

SERVER = Path(__file__).with_name("det_fork_server.py")


def forking() -> bool:
    return os.environ.get("DET_TEST_OFFICIAL_FORK", "1") != "0"


class OfficialDet:
    """``det`` of the official venv in ``bin_dir``, run with ``env`` in ``cwd``. Its fork server
    starts at the first command and ends at :meth:`close` or when the object is collected."""

    def __init__(
        self,
        bin_dir: Path,
        env: dict[str, str],
        cwd: Path | None = None,
        scratch: Path | None = None,
    ) -> None:
        self.bin_dir = bin_dir
        self.env = dict(env)
        self.cwd = Path(cwd) if cwd is not None else Path.cwd()
        # Where the fork server keeps each command's stdin/stdout/stderr files: a directory of
        # the test's (its tmp_path) rather than the temporary directory, so that a client the
        # test never closes leaves nothing there (tests/tmp_check.py).
        self.scratch = scratch
        self._server: _Server | None = None
        self._start_lock = threading.Lock()

    def run(
        self, args: Sequence[str], stdin: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """As ``subprocess.run([det, *args], input=stdin, capture_output=True, text=True,
        env=env, cwd=cwd, timeout=timeout)``: raises ``subprocess.TimeoutExpired`` (the
        command killed) past ``timeout``."""
        argv = [str(self.bin_dir / "det"), *args]
        if not forking():
            return subprocess.run(
                argv,
                input=stdin if stdin is not None else "",
                capture_output=True,
                text=True,
                env=self.env,
                cwd=self.cwd,
                timeout=timeout,
            )
        with self._start_lock:
            if self._server is None:
                self._server = _Server(self.bin_dir, self.env, self.cwd, self.scratch)
                weakref.finalize(self, self._server.close)
            server = self._server
        return server.run(argv, self.env, self.cwd, stdin, timeout)

    def close(self) -> None:
        """Ends the fork server (and any command still running)."""
        with self._start_lock:
            server, self._server = self._server, None
        if server is not None:
            server.close()

    def __enter__(self) -> OfficialDet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Server:
    """The official venv's Python running det_fork_server.py, and the thread that reads its
    replies (which holds no reference to the :class:`OfficialDet`, so that it can be collected)."""

    def __init__(
        self, bin_dir: Path, env: dict[str, str], cwd: Path, scratch: Path | None = None
    ) -> None:
        mine, theirs = socket.socketpair()
        self.tmp = tempfile.mkdtemp(prefix="det-official-", dir=scratch)
        self.proc = subprocess.Popen(
            [str(bin_dir / "python"), str(SERVER), str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.conn = mine
        self.lock = threading.Lock()
        self.replies: dict[int, queue.Queue[dict[str, Any]]] = {}
        self.ids = itertools.count()
        self.closed = False
        threading.Thread(target=_read, args=(mine, self.lock, self.replies), daemon=True).start()

    def run(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        stdin: str | None,
        timeout: float,
    ) -> subprocess.CompletedProcess[str]:
        replies: queue.Queue[dict[str, Any]] = queue.Queue()
        with self.lock:
            assert not self.closed, "the fork server was closed"
            rid = next(self.ids)
            self.replies[rid] = replies
        base = Path(self.tmp) / str(rid)
        files = {"stdin": f"{base}.in", "stdout": f"{base}.out", "stderr": f"{base}.err"}
        Path(files["stdin"]).write_text(stdin or "")
        try:
            message = {"id": rid, "argv": argv, "env": env, "cwd": str(cwd), **files}
            with self.lock:
                self.conn.sendall(json.dumps(message).encode() + b"\n")
            pid = int(_reply(replies, "pid", 60))
            try:
                code = int(_reply(replies, "returncode", timeout))
            except queue.Empty:
                os.kill(pid, signal.SIGKILL)
                _reply(replies, "returncode", 60)
                raise subprocess.TimeoutExpired(argv, timeout) from None
            out = Path(files["stdout"]).read_text(errors="replace")
            err = Path(files["stderr"]).read_text(errors="replace")
            return subprocess.CompletedProcess(argv, code, out, err)
        finally:
            with self.lock:
                self.replies.pop(rid, None)
            for path in files.values():
                Path(path).unlink(missing_ok=True)

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        # shutdown, not only close: the reader thread's pending recv holds the socket open
        self.conn.shutdown(socket.SHUT_RDWR)
        self.conn.close()
        stall_clock.wait_process(self.proc, 30)
        shutil.rmtree(self.tmp, ignore_errors=True)


def _read(
    conn: socket.socket, lock: threading.Lock, replies: dict[int, queue.Queue[dict[str, Any]]]
) -> None:
    buffer = b""
    while True:
        try:
            data = conn.recv(1 << 16)
        except OSError:
            data = b""
        if not data:  # the server ended (or was closed): nobody waits for a reply in vain
            with lock:
                for rid, waiting in replies.items():
                    waiting.put({"id": rid, "error": "the official det's fork server ended"})
            return
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            message = json.loads(line)
            with lock:
                waiting = replies.get(message["id"])
            if waiting is not None:
                waiting.put(message)


def _reply(replies: queue.Queue[dict[str, Any]], key: str, timeout: float) -> Any:
    while True:
        message = replies.get(timeout=timeout)
        if "error" in message:
            raise RuntimeError(message["error"])
        if key in message:
            return message[key]
