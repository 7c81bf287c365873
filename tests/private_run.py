"""Running a process where the official ``determined`` package's fixed info path is private."""

from __future__ import annotations

import os

PRIVATE_RUN = "/run"


def in_private_run(command: list[str]) -> list[str]:
    """``command`` in a mount namespace of its own with an empty tmpfs on /run: the official
    package reads its task info only from /run/determined/info, and writing the host's would
    make every other official client on this machine (other tests, in parallel) believe it runs
    on a cluster."""
    user = [] if os.geteuid() == 0 else ["--map-root-user"]
    return [
        "unshare",
        *user,
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        'mount -t tmpfs tmpfs /run && exec "$@"',
        "sh",
        *command,
    ]
