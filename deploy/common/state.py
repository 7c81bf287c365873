"""The per-user Pulumi state: a local file backend, one stack per cluster id.

Layout (Pulumi's file backend)::

    $XDG_DATA_HOME/det/pulumi/            (default ~/.local/share/det/pulumi)
        passphrase                        encrypts stack secrets (mode 0600, made once)
        .pulumi/stacks/<project>/<cluster-id>.json
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "det" / "pulumi"


def backend_url(directory: Path) -> str:
    return f"file://{directory}"


def ensure_passphrase(directory: Path) -> str:
    """The passphrase Pulumi's secrets provider uses; created (0600) on first use."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "passphrase"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32))
    return path.read_text().strip()


def list_stacks(directory: Path, project: str) -> list[str]:
    """Cluster ids with a stack for ``project``, read from disk (no Pulumi CLI needed)."""
    stacks_dir = directory / ".pulumi" / "stacks" / project
    if not stacks_dir.is_dir():
        return []
    names = set()
    for path in stacks_dir.iterdir():
        for suffix in (".json", ".json.gz"):  # .bak files are Pulumi's backups
            if path.name.endswith(suffix) and len(path.name) > len(suffix):
                names.add(path.name[: -len(suffix)])
    return sorted(names)
