"""Credentials for a private registry of task images (``up --registry-*`` flags).

The server and user name go into master.yaml (``task_container_defaults.registry_auth``); the
password never does. It travels as a Pulumi secret (stack config ``det:registryPassword``,
encrypted in the state) into the cluster's secret (key :data:`SECRET_KEY`, beside the database
password and the TLS key); the master's boot script writes it into the master's 0600
environment file as :data:`PASSWORD_ENV`, which ``det.master.config`` reads. So it is in no
user data, no instance metadata, no master.yaml and no log line.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from det.deploy.common.errors import DeployError

PASSWORD_ENV = "DET_TASK_CONTAINER_DEFAULTS_REGISTRY_AUTH_PASSWORD"
SECRET_KEY = "registry_password"
STACK_CONFIG_KEY = "registryPassword"
#: The server and user name are kept as plain stack config, so a later ``up`` without the
#: ``--registry-*`` flags keeps the registry (flags given again replace them).
SERVER_CONFIG_KEY = "registryServer"
USERNAME_CONFIG_KEY = "registryUsername"
#: Where ``up`` takes the password from when ``--registry-password`` is not given (a flag's
#: value would be visible in the process list and the shell's history).
PASSWORD_FROM_ENV = "DET_REGISTRY_PASSWORD"


@dataclasses.dataclass(frozen=True)
class RegistryAuth:
    """The non-secret half of Docker's AuthConfig for a private registry."""

    server: str
    username: str

    def registry_auth(self) -> dict[str, str]:
        """master.yaml's ``registry_auth`` (Docker AuthConfig keys), without the password."""
        return {"serveraddress": self.server, "username": self.username}


def from_args(args: argparse.Namespace) -> RegistryAuth | None:
    """``--registry-server`` and ``--registry-username`` (both or neither)."""
    server = getattr(args, "registry_server", None)
    username = getattr(args, "registry_username", None)
    if getattr(args, "no_registry", False):
        if server or username or getattr(args, "registry_password", None):
            raise DeployError("--no-registry cannot be combined with --registry-* flags")
        return None
    if not server and not username:
        if getattr(args, "registry_password", None):
            raise DeployError("--registry-password needs --registry-server and --registry-username")
        return None
    if not server or not username:
        raise DeployError("--registry-server and --registry-username go together")
    if any(c.isspace() or c == "/" for c in server):
        raise DeployError(
            f"--registry-server: {server!r} is a registry host (e.g. registry.example.com:5000), "
            "not a URL or an image"
        )
    return RegistryAuth(server=server, username=username)


def password_from_args(args: argparse.Namespace, auth: RegistryAuth | None) -> str | None:
    """The password for ``auth``: ``--registry-password``, else ``$DET_REGISTRY_PASSWORD``.

    None when there is no registry, or on a dry-run (nothing is stored then). A later ``up``
    without it keeps the one the stack stored."""
    if auth is None:
        return None
    given = getattr(args, "registry_password", None) or os.environ.get(PASSWORD_FROM_ENV)
    if given and ("\n" in given or "\r" in given or "\0" in given):
        raise DeployError("the registry password may not contain line breaks or NUL")
    return given or None


def stack_config(auth: RegistryAuth | None) -> dict[str, tuple[str, bool]]:
    """The stack config (``det:`` key → (value, secret)) that records ``auth``; nothing for None
    (the stack keeps what it has)."""
    if auth is None:
        return {}
    return {
        f"det:{SERVER_CONFIG_KEY}": (auth.server, False),
        f"det:{USERNAME_CONFIG_KEY}": (auth.username, False),
    }


def removed_keys(args: argparse.Namespace) -> tuple[str, ...]:
    """The stack config keys ``--no-registry`` removes (none without it)."""
    if not getattr(args, "no_registry", False):
        return ()
    return tuple(f"det:{k}" for k in (SERVER_CONFIG_KEY, USERNAME_CONFIG_KEY, STACK_CONFIG_KEY))


def from_stack_config(get: Any) -> RegistryAuth | None:
    """The registry recorded in the stack config; ``get`` is ``pulumi.Config("det").get``."""
    server, username = get(SERVER_CONFIG_KEY), get(USERNAME_CONFIG_KEY)
    return RegistryAuth(server=server, username=username) if server and username else None


def secret_entry(password: str | None) -> dict[str, str]:
    """The cluster secret's key for the password (nothing without one)."""
    return {SECRET_KEY: password} if password else {}
