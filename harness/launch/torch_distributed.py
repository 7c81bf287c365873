"""``python3 -m det.launch.torch_distributed [TORCHRUN_OVERRIDES… --] (--trial M:C | SCRIPT…)``

Runs ``torchrun`` (``python3 -m torch.distributed.run``) with one worker per slot of this
container (``DET_SLOT_IDS``), each worker's output prefixed by ``det.launch.wrap_rank``.

* One container: the rendezvous is c10d on localhost (``--standalone``: a free port, so two
  tasks on one host-networked machine never collide).
* Several (a trial whose slots span agents: one container per agent, told the gang by the
  master in ``DET_CONTAINER_ADDRS``/``_RANK``, :mod:`det.common.info`): torch's static
  rendezvous at the chief container's address and this allocation's ``C10D_PORT``
  (:mod:`det.launch.ports`), with ``--node_rank`` the container's rank, so global rank 0, the
  chief that reports, is always in container 0. ``DET_CHIEF_IP`` is set for the Core APIs.
* ``--trial module:Class``: a trial class (Determined's ``PyTorchTrial``) run by the official
  package's harness under this launcher, as Determined's own launcher runs it.

Arguments before a ``--`` override ours.
"""

from __future__ import annotations

import json
import logging
import os
import sys

from ..common.info import cluster_info_from_env
from ..common.proc import run_forwarding
from . import ports

logger = logging.getLogger("det.launch.torch_distributed")

C10D_PORT = ports.C10D_BASE


def split_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(torchrun overrides, script)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return [], argv


def trial_script(trial: str, python: str = "python3") -> list[str]:
    """The official harness running trial class ``trial`` (``module:Class``) (pure)."""
    return [python, "-m", "determined.exec.harness", trial]


def build_command(
    nproc: int,
    script: list[str],
    overrides: list[str] | None = None,
    *,
    nnodes: int = 1,
    node_rank: int = 0,
    chief_addr: str = "localhost",
    port: int = C10D_PORT,
    python: str = "python3",
) -> list[str]:
    """The torchrun command line (pure)."""
    cmd = [python, "-m", "torch.distributed.run", "--nnodes", str(nnodes)]
    cmd += ["--nproc_per_node", str(nproc), "--max_restarts", "0"]
    if nnodes == 1:
        cmd += ["--standalone"]
    else:
        # Static rendezvous: node ranks are ours (c10d's dynamic one numbers nodes as they
        # arrive, and the chief could land in any container).
        cmd += ["--node_rank", str(node_rank), "--master_addr", chief_addr]
        cmd += ["--master_port", str(port)]
    cmd += list(overrides or [])
    cmd += ["--module", "det.launch.wrap_rank", "RANK", "--", *script]
    return cmd


def slot_count(env: dict[str, str]) -> int:
    raw = env.get("DET_SLOT_IDS")
    return max(1, len(json.loads(raw))) if raw else 1


def parse_trial(script: list[str]) -> str | bool | None:
    """``--trial X`` → X; no ``--trial`` → None; a malformed one → False."""
    if not script or script[0] != "--trial":
        return None
    return script[1] if len(script) == 2 else False


def main(argv: list[str]) -> int:
    overrides, script = split_args(argv)
    if "--trial" in overrides and not script:
        overrides, script = [], overrides
    trial = parse_trial(script)
    if trial is False:
        print(
            "det.launch.torch_distributed: --trial takes one module:Class and nothing after it",
            file=sys.stderr,
        )
        return 2
    if isinstance(trial, str):
        script = trial_script(trial, sys.executable)
    if not script:
        print(
            "usage: python3 -m det.launch.torch_distributed [OVERRIDES --] (--trial M:C | SCRIPT...)",
            file=sys.stderr,
        )
        return 2
    env = ports.with_ports(os.environ)
    env["USE_TORCH_DISTRIBUTED"] = "True"
    info = cluster_info_from_env(env)
    addrs = info.container_addrs if info is not None else ["127.0.0.1"]
    rank = info.container_rank if info is not None else 0
    env["DET_CHIEF_IP"] = addrs[0]
    cmd = build_command(
        slot_count(env),
        script,
        overrides,
        nnodes=len(addrs),
        node_rank=rank,
        chief_addr=addrs[0],
        port=ports.c10d_port(env),
        python=sys.executable,
    )
    logger.info("launching: %s", cmd)
    return run_forwarding(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
