"""``python3 -m det.launch.torch_distributed [TORCHRUN_OVERRIDES… --] SCRIPT…``

Runs ``torchrun`` (``python3 -m torch.distributed.run``) with one worker per slot of this
container (``DET_SLOT_IDS``), each worker's output prefixed by ``det.launch.wrap_rank``. In one
container the rendezvous is c10d on localhost (``--standalone``: a free port, so two tasks on
one host-networked machine never collide). Arguments before a ``--`` override ours.
"""

from __future__ import annotations

import json
import logging
import os
import sys

from ..common.proc import run_forwarding

logger = logging.getLogger("det.launch.torch_distributed")

C10D_PORT = 29400


def split_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(torchrun overrides, script)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return [], argv


def build_command(
    nproc: int,
    script: list[str],
    overrides: list[str] | None = None,
    *,
    nnodes: int = 1,
    node_rank: int = 0,
    chief_addr: str = "localhost",
    python: str = "python3",
) -> list[str]:
    """The torchrun command line (pure)."""
    cmd = [python, "-m", "torch.distributed.run", "--nnodes", str(nnodes)]
    cmd += ["--nproc_per_node", str(nproc), "--max_restarts", "0"]
    if nnodes == 1:
        cmd += ["--standalone"]
    else:
        cmd += ["--node_rank", str(node_rank), "--rdzv_backend", "c10d"]
        cmd += ["--rdzv_endpoint", f"{chief_addr}:{C10D_PORT}"]
    cmd += list(overrides or [])
    cmd += ["--module", "det.launch.wrap_rank", "RANK", "--", *script]
    return cmd


def slot_count(env: dict[str, str]) -> int:
    raw = env.get("DET_SLOT_IDS")
    return max(1, len(json.loads(raw))) if raw else 1


def main(argv: list[str]) -> int:
    overrides, script = split_args(argv)
    if "--trial" in overrides or (script and script[0] == "--trial"):
        print(
            "det.launch.torch_distributed: --trial (Trial classes) is not supported; "
            "pass a Core API script instead",
            file=sys.stderr,
        )
        return 2
    if not script:
        print(
            "usage: python3 -m det.launch.torch_distributed [OVERRIDES --] SCRIPT...",
            file=sys.stderr,
        )
        return 2
    env = dict(os.environ)
    env["USE_TORCH_DISTRIBUTED"] = "True"
    cmd = build_command(slot_count(env), script, overrides, python=sys.executable)
    logger.info("launching: %s", cmd)
    return run_forwarding(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
