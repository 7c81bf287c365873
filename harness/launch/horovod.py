"""``python3 -m det.launch.horovod [HOROVODRUN_ARGS… --] SCRIPT…``: ``horovodrun`` over this
container's slots. Horovod is not a dependency; ``build_command`` (pure) is what is tested.
Single container only (multi-machine Horovod needs sshd between containers)."""

from __future__ import annotations

import json
import os
import sys

from ..common.proc import run_forwarding
from .torch_distributed import split_args


def build_command(nproc: int, script: list[str], extra: list[str] | None = None) -> list[str]:
    return [
        "horovodrun",
        "-np",
        str(nproc),
        "-H",
        f"localhost:{nproc}",
        "--start-timeout",
        "120",
        "--gloo-timeout-seconds",
        "240",
        *(extra or []),
        "--",
        "python3",
        "-m",
        "det.launch.wrap_rank",
        "HOROVOD_RANK",
        "--",
        *script,
    ]


def main(argv: list[str]) -> int:
    extra, script = split_args(argv)
    if not script:
        print("usage: python3 -m det.launch.horovod [ARGS --] SCRIPT...", file=sys.stderr)
        return 2
    slots = json.loads(os.environ.get("DET_SLOT_IDS", '["0"]'))
    return run_forwarding(build_command(max(1, len(slots)), script, extra))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
