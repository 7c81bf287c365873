"""Pool provider config: the ``provider:`` block of a resource pool in master.yaml.

Determined's keys and defaults, so an existing master.yaml keeps working, plus our ordered
``fallback`` list. The shared provisioning keys live in :class:`ProvisionerConfig`
(``config_base.py``); each cloud extends it with ``type: <cloud>`` in a module of its own
(``aws_config.py``, ``gcp_config.py``). This module joins them: :data:`CONFIG_TYPES` is the one
list of clouds, and :func:`parse_provider_config` is the one entry point that turns a dict into a
model or a :class:`ProviderConfigError` whose message names the field path.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Union, get_args

import pydantic
from pydantic import Field

from det.master.provisioner.aws_config import AwsProviderConfig
from det.master.provisioner.config_base import (
    AgentInstall,
    CostConfig,
    Duration,
    FallbackEntry,
    ProviderConfigError,
    ProvisionerConfig,
    parse_duration,
)
from det.master.provisioner.gcp_config import GcpProviderConfig

__all__ = [
    "CONFIG_TYPES",
    "AgentInstall",
    "AwsProviderConfig",
    "CostConfig",
    "Duration",
    "FallbackEntry",
    "GcpProviderConfig",
    "ProviderConfigError",
    "ProvisionerConfig",
    "parse_duration",
    "parse_provider_config",
]

# Every cloud's config model, by its ``type``. Add a cloud here.
CONFIG_TYPES: tuple[type[ProvisionerConfig], ...] = (AwsProviderConfig, GcpProviderConfig)


def provider_config_types() -> tuple[type[ProvisionerConfig], ...]:
    return CONFIG_TYPES


def _provider_adapter() -> pydantic.TypeAdapter[Any]:
    members = provider_config_types()
    union: Any = members[0] if len(members) == 1 else Union[members]  # noqa: UP007
    return pydantic.TypeAdapter(Annotated[union, Field(discriminator="type")])


def _format_errors(exc: pydantic.ValidationError, path: str, tag: str) -> str:
    parts = []
    for error in exc.errors():
        loc = [str(p) for p in error["loc"]]
        if loc and loc[0] == tag:  # the union's discriminator value, not a field
            loc = loc[1:]
        msg = error["msg"].removeprefix("Value error, ")
        if error["type"] == "union_tag_invalid":
            ctx = error.get("ctx", {})
            loc, msg = (
                ["type"],
                f"unknown provider type {ctx.get('tag')!r} (one of: {ctx.get('expected_tags')})",
            )
        # Model-level checks say "field.path: reason"; fold the field into the path.
        head, sep, rest = msg.partition(": ")
        if not loc and sep and re.fullmatch(r"[\w.]+", head):
            loc, msg = [head], rest
        parts.append(f"{'.'.join([path, *loc])}: {msg}")
    return "; ".join(parts)


def parse_provider_config(data: Any, *, path: str = "provider") -> ProvisionerConfig:
    """Validate a pool's ``provider`` block; errors name the field (``provider.max_instances``)."""
    if not isinstance(data, dict):
        raise ProviderConfigError(f"{path}: expected a mapping")
    if "type" not in data:
        names = ", ".join(
            str(arg)
            for t in provider_config_types()
            for arg in get_args(t.model_fields["type"].annotation)
        )
        raise ProviderConfigError(f"{path}.type: required (one of: {names})")
    try:
        config: ProvisionerConfig = _provider_adapter().validate_python(data)
    except pydantic.ValidationError as exc:
        raise ProviderConfigError(_format_errors(exc, path, str(data["type"]))) from None
    try:
        config.check_cost()
    except ValueError as exc:
        raise ProviderConfigError(f"{path}.{exc}") from None
    return config
