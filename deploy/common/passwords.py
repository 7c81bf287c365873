"""The cluster's passwords, made the same way on every cloud.

Each cloud's ``ClusterSecret`` stores :attr:`Passwords.payload` in its secret store; the master
reads that JSON document (``db_password``, ``initial_user_password``, with TLS the
master's ``tls_key`` and ``tls_cert``, with a private registry ``registry_password``) at
boot, so no password appears in user data or instance metadata.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Protocol, TypedDict

import pulumi
import pulumi_random as random

from det.deploy.common import registry
from det.deploy.common import serverless as sl
from det.deploy.common.boot import BootOptions
from det.deploy.common.tls import TlsMaterial


class SecretContents(TypedDict):
    """What the cluster's secret holds beside the generated database password: the keyword
    arguments both clouds' ``storage.ClusterSecretArgs`` share (:func:`contents`)."""

    initial_user_password: pulumi.Input[str] | None
    """Given by the user; None: generated."""
    tls: TlsMaterial | None
    """The master's certificate and key (with TLS)."""
    registry_password: pulumi.Input[str] | None
    """A private registry's password (with ``--registry-server``)."""


class ClusterSettings(Protocol):
    """What :func:`contents` reads of a cloud's config (``AwsConfig``, ``GcpConfig``)."""

    @property
    def tls(self) -> bool: ...
    @property
    def boot(self) -> BootOptions: ...
    @property
    def registry(self) -> registry.RegistryAuth | None: ...


def contents(
    cfg: ClusterSettings,
    initial_user_password: pulumi.Input[str] | None,
    registry_password: pulumi.Input[str] | None,
) -> SecretContents:
    """The secret's contents for ``cfg``: the certificate only with TLS, the registry's
    password only with a private registry."""
    return {
        "initial_user_password": initial_user_password,
        "tls": cfg.boot.tls_material() if cfg.tls else None,
        "registry_password": registry_password if cfg.registry else None,
    }


@dataclasses.dataclass(frozen=True)
class Passwords:
    db_password: pulumi.Output[str]
    initial_user_password: pulumi.Output[str]
    payload: pulumi.Output[str]
    """The secret's value; derived from secrets, so Pulumi keeps it secret."""


def generate(
    name: str,
    initial_user_password: pulumi.Input[str] | None,
    opts: pulumi.ResourceOptions,
    tls: TlsMaterial | None = None,
    registry_password: pulumi.Input[str] | None = None,
) -> Passwords:
    """A generated database password and the admin password (given, else generated), as
    ``RandomPassword`` resources ``<name>-db`` and ``<name>-user`` created with ``opts``; with
    ``tls`` the payload also carries the master's ``tls_key`` and ``tls_cert``, with
    ``registry_password`` the private registry's password (``common.registry``)."""
    db_password = random.RandomPassword(f"{name}-db", length=32, special=False, opts=opts)
    if initial_user_password is not None:
        user_password = pulumi.Output.secret(initial_user_password)
    else:
        user_password = random.RandomPassword(
            f"{name}-user", length=20, special=False, opts=opts
        ).result
    extra = {"tls_key": tls.key_pem, "tls_cert": tls.cert_pem} if tls else {}
    payload = pulumi.Output.all(
        db_password.result, user_password, pulumi.Output.from_input(registry_password)
    ).apply(
        lambda v: json.dumps(
            {
                "db_password": v[0],
                "initial_user_password": v[1],
                **extra,
                **registry.secret_entry(v[2]),
            }
        )
    )
    return Passwords(
        db_password=pulumi.Output.secret(db_password.result),
        initial_user_password=pulumi.Output.secret(user_password),
        payload=pulumi.Output.secret(payload),
    )


@dataclasses.dataclass(frozen=True)
class ServerlessValues:
    passwords: Passwords
    by_env: dict[str, tuple[str, pulumi.Input[str]]]
    """Environment variable of the serverless master → (its secret's name suffix, the value)."""


def serverless_values(
    name: str,
    initial_user_password: pulumi.Input[str] | None,
    registry_password: pulumi.Input[str] | None,
    opts: pulumi.ResourceOptions,
) -> ServerlessValues:
    """What a serverless master reads from its environment, each value a secret of its own on
    every cloud: the passwords of :func:`generate`, a generated agent token (``RandomPassword``
    ``<name>-agent-token``) and, when given, the private registry's password."""
    made = generate(name, initial_user_password, opts)
    token = random.RandomPassword(f"{name}-agent-token", length=40, special=False, opts=opts)
    values: dict[str, tuple[str, pulumi.Input[str]]] = {
        sl.DB_PASSWORD_ENV: ("db-password", made.db_password),
        sl.AGENT_TOKEN_ENV: ("agent-token", pulumi.Output.secret(token.result)),
        sl.ADMIN_PASSWORD_ENV: ("admin-password", made.initial_user_password),
    }
    if registry_password is not None:
        values[sl.REGISTRY_PASSWORD_ENV] = (
            "registry-password",
            pulumi.Output.secret(registry_password),
        )
    return ServerlessValues(made, values)
