"""``python3 -m det.launch.wrap_rank RANK -- cmd…``: run ``cmd``, prefixing every line it prints
with ``[rank=N] ``. ``RANK`` is a number or the name of an environment variable holding it.
stdout stays stdout and stderr stays stderr; signals are forwarded; the exit code is kept.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
from typing import BinaryIO

from ..common.proc import exit_code, forward_signals


def resolve_rank(value: str, env: dict[str, str]) -> str:
    if value.isdigit():
        return value
    if value not in env:
        raise ValueError(f"rank {value!r} is neither a number nor a set environment variable")
    return env[value]


def _pump(src: BinaryIO, dst: BinaryIO, prefix: bytes) -> None:
    for line in iter(src.readline, b""):
        dst.write(prefix + line)
        dst.flush()
    # A last line without a newline is returned by readline too; nothing left to do.


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="det.launch.wrap_rank")
    parser.add_argument("rank", help="the rank, or an environment variable holding it")
    parser.add_argument("--no-redirect-stdio", action="store_true")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    if not cmd:
        parser.error("missing command")
    rank = resolve_rank(args.rank, dict(os.environ))
    if args.no_redirect_stdio:
        proc: subprocess.Popen[bytes] = subprocess.Popen(cmd)
        with forward_signals(proc):
            return exit_code(proc.wait())
    prefix = f"[rank={rank}] ".encode()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    pumps = [
        threading.Thread(target=_pump, args=(proc.stdout, sys.stdout.buffer, prefix)),
        threading.Thread(target=_pump, args=(proc.stderr, sys.stderr.buffer, prefix)),
    ]
    for t in pumps:
        t.start()
    with forward_signals(proc):
        code = proc.wait()
    for t in pumps:
        t.join()
    return exit_code(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
