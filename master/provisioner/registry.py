"""Cloud type -> provider factory: the one place a pool's parsed ``provider`` config becomes
its :class:`~det.master.provisioner.provider.Provider`. The config half of the registry is
``config.CONFIG_TYPES`` (type -> config model); adding a cloud adds one entry to each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from det.master.provisioner.aws import AwsProvider
from det.master.provisioner.config import AwsProviderConfig, GcpProviderConfig, ProvisionerConfig
from det.master.provisioner.gcp import GcpProvider
from det.master.provisioner.provider import Provider

# ``common``: cluster_id, pool, master_url, agent_token, extra_env and enroll (a one-time ticket for
# each launch), the same for every cloud.
Factory = Callable[[Any, dict[str, Any]], Provider]


def _aws(config: AwsProviderConfig, common: dict[str, Any]) -> Provider:
    return AwsProvider.for_pool(config, **common)


def _gcp(config: GcpProviderConfig, common: dict[str, Any]) -> Provider:
    endpoint = (
        config.endpoint_url.rstrip("/").removesuffix("/compute/v1") if config.endpoint_url else None
    )
    extra: dict[str, Any] = {}
    if endpoint:
        extra["api_endpoint"] = endpoint
        if endpoint.startswith("http://"):
            # A local emulator: google-auth would otherwise probe for real credentials.
            # google-auth comes with the optional det[gcp] extra, needed only here.
            from google.auth.credentials import AnonymousCredentials

            extra["credentials"] = AnonymousCredentials()  # type: ignore[no-untyped-call]
    return GcpProvider.for_pool(config, **common, **extra)


FACTORIES: dict[str, Factory] = {"aws": _aws, "gcp": _gcp}


def build(config: ProvisionerConfig, common: dict[str, Any]) -> Provider:
    """The provider for ``config`` (its ``type`` picks the factory); ValueError for a type
    that has a config model but no factory."""
    factory = FACTORIES.get(str(getattr(config, "type", "")))
    if factory is None:
        raise ValueError(f"provider.type: no provider for {getattr(config, 'type', None)!r}")
    return factory(config, common)
