"""Cloud type -> provider factory: the one place a pool's parsed ``provider`` config becomes
its :class:`~det.master.provisioner.provider.Provider`. The config half of the registry is
``config.CONFIG_TYPES`` (type -> config model); adding a cloud adds one entry to each."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from typing_extensions import TypedDict

from det.master.provisioner.aws import AwsProvider
from det.master.provisioner.config import AwsProviderConfig, GcpProviderConfig, ProvisionerConfig
from det.master.provisioner.gcp import GcpProvider
from det.master.provisioner.provider import Provider


class Common(TypedDict):
    """What every cloud's provider is built with besides its config."""

    cluster_id: str
    pool: str
    master_url: str
    agent_token: str
    extra_env: Mapping[str, str] | None
    # A one-time enrollment ticket for each launch of ``count`` machines.
    enroll: Callable[[int], str] | None


# Each factory takes its own cloud's config model (``build`` picks it by the config's ``type``).
Factory = Callable[[Any, Common], Provider]


def _aws(config: AwsProviderConfig, common: Common) -> Provider:
    return AwsProvider.for_pool(config, **common)


def _gcp(config: GcpProviderConfig, common: Common) -> Provider:
    endpoint = (
        config.endpoint_url.rstrip("/").removesuffix("/compute/v1") if config.endpoint_url else None
    )
    credentials = None
    if endpoint and endpoint.startswith("http://"):
        # A local emulator: google-auth would otherwise probe for real credentials.
        # google-auth comes with the optional det[gcp] extra, needed only here.
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
    return GcpProvider.for_pool(config, **common, api_endpoint=endpoint, credentials=credentials)


FACTORIES: dict[str, Factory] = {"aws": _aws, "gcp": _gcp}


def build(config: ProvisionerConfig, common: Common) -> Provider:
    """The provider for ``config`` (its ``type`` picks the factory); ValueError for a type
    that has a config model but no factory."""
    factory = FACTORIES.get(str(getattr(config, "type", "")))
    if factory is None:
        raise ValueError(f"provider.type: no provider for {getattr(config, 'type', None)!r}")
    return factory(config, common)
