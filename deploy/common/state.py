"""The per-user Pulumi state: a local file backend, one stack per cluster id.

Layout (Pulumi's file backend)::

    $XDG_DATA_HOME/det/pulumi/            (default ~/.local/share/det/pulumi)
        passphrase                        encrypts stack secrets (mode 0600, made once)
        .pulumi/stacks/<project>/<cluster-id>.json

A remote backend (``DET_DEPLOY_STATE_URL`` or the ``--state-url`` flag, e.g.
``s3://bucket/prefix`` or ``gs://bucket/prefix``) keeps the stacks where every machine can
reach them, so ``list`` and ``down`` work from anywhere; stack secrets are then encrypted with
``PULUMI_CONFIG_PASSPHRASE``, which every machine must share.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from det.deploy.common.errors import DeployError


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "det" / "pulumi"


STATE_URL_ENV = "DET_DEPLOY_STATE_URL"
_REMOTE_SCHEMES = ("s3://", "gs://", "azblob://", "file://")


def backend_url(directory: Path, env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return env.get(STATE_URL_ENV) or f"file://{directory}"


def is_local(url: str, directory: Path) -> bool:
    return url == f"file://{directory}"


def check_state_url(url: str) -> str:
    """``--state-url``: one of the backends Pulumi's self-managed state supports."""
    scheme, sep, rest = url.partition("://")
    if not sep or f"{scheme}://" not in _REMOTE_SCHEMES or not rest.strip("/"):
        raise DeployError(
            f"--state-url {url!r}: expected s3://bucket[/prefix] or gs://bucket[/prefix]"
        )
    return url


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
