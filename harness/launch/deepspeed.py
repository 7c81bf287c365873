"""``python3 -m det.launch.deepspeed SCRIPT…``: DeepSpeed's launcher over this container's slots.

DeepSpeed is not a dependency; ``build_command`` (pure) is what is tested here. Single container
only: multi-machine DeepSpeed needs sshd between containers, which the platform does not set up.
"""

from __future__ import annotations

import json
import os
import sys

from ..common.proc import run_forwarding


def build_command(nproc: int, script: list[str], master_addr: str = "127.0.0.1") -> list[str]:
    gpus = ",".join(str(i) for i in range(nproc))
    return [
        "deepspeed",
        "--include",
        f"localhost:{gpus}",
        "--master_addr",
        master_addr,
        "--no_python",
        "--no_local_rank",
        "--no_ssh_check",
        "--",
        "python3",
        "-m",
        "det.launch.wrap_rank",
        "RANK",
        "--",
        *script,
    ]


def main(argv: list[str]) -> int:
    script = argv[1:] if argv and argv[0] == "--" else argv
    if not script:
        print("usage: python3 -m det.launch.deepspeed SCRIPT...", file=sys.stderr)
        return 2
    slots = json.loads(os.environ.get("DET_SLOT_IDS", '["0"]'))
    return run_forwarding(build_command(max(1, len(slots)), script))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
