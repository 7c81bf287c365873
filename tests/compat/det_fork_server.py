"""A fork server for the official ``det`` command, run by the official venv's Python.

It imports what ``det`` imports (``determined.cli.__main__``) once, then forks a child per
request that runs ``det`` as its console script does, with the request's arguments,
environment, working directory and stdin, its stdout and stderr in files, and exits as the
interpreter would (the exit code of ``SystemExit``, 1 and a traceback for an uncaught
exception, ``atexit`` hooks run). The client is tests/compat/official_cli.py; this file imports
nothing of det's, since the official venv has none of it.

Protocol (one JSON object a line, over the socket whose fd is ``argv[1]``): a request
``{"id", "argv", "env", "cwd", "stdin", "stdout", "stderr"}`` (the last three are paths) gets
``{"id", "pid"}`` once forked and ``{"id", "returncode"}`` once the child is reaped
(negative: the signal that ended it). At the end of the socket, the live children are killed
and the server exits.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import select
import signal
import socket
import sys
import threading
import traceback

import determined.cli.__main__ as det_main  # what the console script imports


def _child(conn: socket.socket, req: dict) -> None:  # type: ignore[type-arg]
    code = 1
    try:
        conn.close()
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        for fd, path, flags in (
            (0, req["stdin"], os.O_RDONLY),
            (1, req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
            (2, req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        ):
            opened = os.open(path, flags, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
        sys.stderr = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False),
            encoding="utf-8",
            errors="backslashreplace",
            line_buffering=True,
        )
        sys.argv = list(req["argv"])
        code = _run()
    finally:
        os._exit(code)


def _run() -> int:
    """``sys.exit(main())`` and the interpreter's exit, as ``det``'s console script has them."""
    try:
        # main's default argument was bound at import, to this server's argv: pass the child's
        result = det_main.main(sys.argv[1:])
        code = _exit_code(result)
    except SystemExit as e:
        code = _exit_code(e.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # non-daemon threads, as at exit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            code = 120  # what the interpreter gives when it cannot flush stdout
    return code


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def main() -> None:
    conn = socket.socket(fileno=int(sys.argv[1]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the client's ^C is not ours
    children: dict[int, object] = {}
    buffer = b""

    def send(message: dict) -> None:  # type: ignore[type-arg]
        conn.sendall(json.dumps(message).encode() + b"\n")

    while True:
        ready, _, _ = select.select([conn], [], [], 0.005 if children else None)
        if ready:
            data = conn.recv(1 << 16)
            if not data:
                for pid in children:
                    os.kill(pid, signal.SIGKILL)
                return
            buffer += data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                req = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    signal.signal(signal.SIGINT, signal.default_int_handler)
                    _child(conn, req)
                children[pid] = req["id"]
                send({"id": req["id"], "pid": pid})
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            send({"id": children.pop(pid), "returncode": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    main()
