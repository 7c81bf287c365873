"""The agent's own refusal of bind mounts, whatever the master sends: a task container never
mounts the Docker engine's socket or the agent's own state (its state directory, harness
bundle, token file), nor anything above them (``/``, ``/var``).

Defence in depth behind the master's task container policy (det.master.container_policy): the
master judges paths as written, while the agent resolves them on its own host, symbolic links
included (a link to ``/var/run`` in a data directory is refused here).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from det.common.container_spec import BindMount

#: Where Docker engines (and containerd under them) listen on Linux.
ENGINE_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd")


class MountRefused(Exception):
    """A bind mount the agent refuses; the message names it and why (one line)."""


def engine_sockets(environ: Mapping[str, str]) -> list[str]:
    """The engine's socket paths: the usual ones and ``DOCKER_HOST``'s (``unix://``)."""
    out = list(ENGINE_SOCKETS)
    host = environ.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        out.append(host.removeprefix("unix://"))
    return out


def _real(path: str) -> str:
    return os.path.realpath(path)


def _within(path: str, root: str) -> bool:
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")


class MountGuard:
    def __init__(self, protected: Iterable[str | Path]) -> None:
        """``protected``: paths no task may mount (each also as its real path)."""
        paths: dict[str, None] = {}
        for p in protected:
            absolute = os.path.abspath(str(p))
            paths[absolute] = None
            paths[_real(absolute)] = None
        self.protected = tuple(paths)

    def check(self, mounts: Iterable[BindMount]) -> None:
        """MountRefused for the first mount whose source (as written, or resolved on this host)
        is, is under or is above a protected path."""
        for i, m in enumerate(mounts):
            source = str(m.get("hostPath") or "")
            if not source.startswith("/"):
                raise MountRefused(f"bindMounts[{i}].hostPath: must be an absolute path")
            for candidate in dict.fromkeys((os.path.normpath(source), _real(source))):
                for p in self.protected:
                    if _within(candidate, p) or _within(p, candidate):
                        raise MountRefused(
                            f"bindMounts[{i}].hostPath: {source} exposes {p}, the agent's own"
                            " state or the Docker engine's socket: the agent mounts it for no task"
                        )
