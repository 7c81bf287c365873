"""Pool provider config: the ``provider:`` block of a resource pool in master.yaml.

Determined's keys and defaults, so an existing master.yaml keeps working, plus our ordered
``fallback`` list. The shared provisioning keys live in :class:`ProvisionerConfig`; each cloud
extends it with ``type: <cloud>``. :data:`ProviderConfig` is the discriminated union over the
clouds, built in one place (:func:`provider_config_types`), and :func:`parse_provider_config` is
the one entry point that turns a dict into a model or a :class:`ProviderConfigError` whose
message names the field path.

Durations accept Go-style strings as Determined does (``"30s"``, ``"5m"``, ``"1h30m"``).
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Literal, Union, get_args

import pydantic
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from det.master.provisioner import instance_types
from det.master.provisioner.cost import CostPolicy
from det.master.provisioner.decider import ScalePolicy
from det.master.provisioner.provider import LaunchOption, Market

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_duration(value: Any) -> dt.timedelta:
    """``"1h30m"`` → ``timedelta``; numbers are seconds; ``"0"`` is zero."""
    if isinstance(value, dt.timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return dt.timedelta(seconds=value)  # bare numbers are seconds
    if not isinstance(value, str):
        raise ValueError('expected a duration string such as "30s", "5m" or "1h"')
    text = value.strip()
    if text == "0":
        return dt.timedelta(0)
    pos, seconds = 0, 0.0
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if not match:
            raise ValueError(f'invalid duration {value!r} (expected e.g. "30s", "5m", "1h")')
        seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if not text:
        raise ValueError("empty duration")
    return dt.timedelta(seconds=seconds)


Duration = Annotated[dt.timedelta, BeforeValidator(parse_duration)]


class ProviderConfigError(ValueError):
    """The provider block is invalid; the message names the field path."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FallbackEntry(_Model):
    """One entry of the ordered fallback list; unset keys inherit the pool's own values."""

    instance_type: str | None = None
    instance_slots: int | None = Field(None, ge=0)
    spot: bool | None = None


class CostConfig(_Model):
    """det's cost control for the pool (see ``det.master.provisioner.cost``)."""

    prices: dict[str, Annotated[float, Field(ge=0)]] = {}
    spot_prices: dict[str, Annotated[float, Field(ge=0)]] = {}
    max_hourly_cost: float | None = Field(None, gt=0)
    monthly_budget: float | None = Field(None, gt=0)

    def policy(self) -> CostPolicy:
        return CostPolicy(
            prices=dict(self.prices),
            spot_prices=dict(self.spot_prices),
            max_hourly_cost=self.max_hourly_cost,
            monthly_budget=self.monthly_budget,
        )


class AgentInstall(_Model):
    """Ours: how a new agent VM installs det (``det deploy`` writes it): the wheel the master
    was installed from (``s3://``, ``gs://`` or ``https://``, fetched with the VM's role and
    checked against ``wheel_sha256``), its constraints file, an optional package index for the
    dependencies, and the wheel's extras."""

    wheel_url: str
    wheel_sha256: str = ""
    constraints_url: str | None = None
    package_index: str | None = None
    extras: str = "agent"


class ProvisionerConfig(_Model):
    """Keys every cloud shares (Determined's provisioner config)."""

    type: str
    master_url: str | None = None
    master_cert_name: str | None = None
    startup_script: str = ""
    container_startup_script: str = ""
    agent_docker_network: str = "default"
    agent_docker_runtime: str = "runc"
    agent_docker_image: str | None = None
    agent_fluent_image: str | None = None
    agent_reconnect_attempts: int = Field(5, ge=0)
    agent_reconnect_backoff: int = Field(5, ge=0)
    agent_config_file_contents: dict[str, Any] | None = None
    agent_install: AgentInstall | None = None
    max_idle_agent_period: Duration = dt.timedelta(minutes=20)
    max_agent_starting_period: Duration = dt.timedelta(minutes=20)
    # Ours: how long a registered agent may miss heartbeats before its machine is replaced.
    max_agent_disconnected_period: Duration = dt.timedelta(minutes=5)
    min_instances: int = Field(0, ge=0)
    max_instances: int = Field(5, ge=0)
    # Determined: how long a launch error holds. Ours: the cap of the exponential backoff
    # between failed launches (10 s, 20 s, 40 s… up to this).
    launch_error_timeout: Duration = dt.timedelta(minutes=5)
    # Errors tolerated (retried at the next pass) before backing off.
    launch_error_retries: int = Field(0, ge=0)
    # Ours: instance prices, an hourly cap and a monthly budget for the pool's launches.
    cost: CostConfig | None = None

    @pydantic.field_validator("master_url")
    @classmethod
    def _check_master_url(cls, value: str | None) -> str | None:
        if value and not re.match(r"^https?://[^/]+/?$", value):
            raise ValueError("invalid master url (expecting scheme://host:port, http or https)")
        return value

    @model_validator(mode="after")
    def _check_bounds(self) -> ProvisionerConfig:
        if self.max_instances < self.min_instances:
            raise ValueError("max_instances: must be greater than or equal to min_instances")
        for name in ("max_idle_agent_period", "max_agent_starting_period"):
            if getattr(self, name) <= dt.timedelta(0):
                raise ValueError(f"{name}: must be greater than 0")
        return self

    def launch_options(self) -> list[LaunchOption]:  # pragma: no cover - per cloud
        raise NotImplementedError

    def check_cost(self) -> None:
        """With a cap or a budget, every instance type the pool may launch needs a price."""
        cost = self.cost
        if cost is None or (cost.max_hourly_cost is None and cost.monthly_budget is None):
            return
        missing = sorted({o.instance_type for o in self.launch_options()} - set(cost.prices))
        if missing:
            raise ValueError(
                f"cost.prices: no price for {', '.join(missing)} (needed by"
                " cost.max_hourly_cost / cost.monthly_budget; USD per instance-hour)"
            )

    def scale_policy(self, *, max_aux_containers_per_agent: int = 100) -> ScalePolicy:
        """The decider's view of this config.

        ``max_aux_containers_per_agent`` is the pool's own key (beside ``provider``): how many
        zero-slot tasks one new agent can take.
        """
        return ScalePolicy(
            options=tuple(self.launch_options()),
            min_instances=self.min_instances,
            max_instances=self.max_instances,
            max_idle_agent_period=self.max_idle_agent_period,
            max_agent_starting_period=self.max_agent_starting_period,
            max_agent_disconnected_period=self.max_agent_disconnected_period,
            launch_error_timeout=self.launch_error_timeout,
            launch_error_retries=self.launch_error_retries,
            max_aux_per_instance=max(1, max_aux_containers_per_agent),
            cost=self.cost.policy() if self.cost else None,
        )


class AwsNetworkInterface(_Model):
    public_ip: bool = True
    subnet_id: str | None = None
    security_group_id: str | None = None


class AwsTag(_Model):
    key: str
    value: str


class AwsFallbackEntry(FallbackEntry):
    subnet_id: str | None = None


class AwsProviderConfig(ProvisionerConfig):
    """``provider: {type: aws, ...}`` (Determined's keys, plus ``fallback`` and ``endpoint_url``)."""

    type: Literal["aws"]
    region: str | None = None
    image_id: str
    instance_type: str = "g4dn.metal"
    instance_slots: int | None = Field(None, ge=0)
    cpu_slots_allowed: bool = False
    instance_name: str = "det-agent"
    ssh_key_name: str | None = None
    iam_instance_profile_arn: str | None = None
    network_interface: AwsNetworkInterface = AwsNetworkInterface()
    # Shorthands for network_interface.subnet_id / .security_group_id.
    subnet_id: str | None = None
    security_group_id: str | None = None
    root_volume_size: int = Field(200, ge=8)
    tag_key: str = "managed_by"
    tag_value: str | None = None
    custom_tags: list[AwsTag] = []
    spot: bool = False
    spot_max_price: str | None = None
    log_group: str | None = None
    log_stream: str | None = None
    fallback: list[AwsFallbackEntry] = []
    # Ours: an explicit EC2 endpoint (tests); AWS_ENDPOINT_URL also works.
    endpoint_url: str | None = None

    @pydantic.field_validator("spot_max_price")
    @classmethod
    def _check_price(cls, value: str | None) -> str | None:
        if value in (None, "", "OnDemand"):
            return None
        try:
            price = Decimal(value)
        except InvalidOperation:
            raise ValueError(
                f"spot max price must be a number such as '0.50', got {value!r}"
            ) from None
        if not price.is_finite() or price <= 0:
            raise ValueError(f"spot max price must be positive, got {value!r}")
        return value

    @model_validator(mode="after")
    def _check_aws(self) -> AwsProviderConfig:
        for key in ("subnet_id", "security_group_id"):
            top, nested = getattr(self, key), getattr(self.network_interface, key)
            if top and nested and top != nested:
                raise ValueError(f"{key}: disagrees with network_interface.{key}")
        for index, option in enumerate(self.launch_options()):
            if option.slots < 0:
                where = "instance_type" if index == 0 else f"fallback.{index - 1}.instance_type"
                raise ValueError(
                    f"{where}: unknown instance type {option.instance_type!r}; set"
                    " instance_slots, or use a known type (p2-p5, g3-g6e GPU sizes, or a"
                    " CPU family such as c5, m5, t3)"
                )
        return self

    @property
    def effective_subnet_id(self) -> str | None:
        return self.subnet_id or self.network_interface.subnet_id

    @property
    def effective_security_group_id(self) -> str | None:
        return self.security_group_id or self.network_interface.security_group_id

    def _option(
        self, instance_type: str, slots: int | None, subnet: str | None, spot: bool
    ) -> LaunchOption:
        counted = instance_types.slots_for(
            instance_type, override=slots, cpu_slots_allowed=self.cpu_slots_allowed
        )
        return LaunchOption(
            instance_type=instance_type,
            zone=subnet,
            market=Market.SPOT if spot else Market.ON_DEMAND,
            slots=-1 if counted is None else counted,
        )

    def launch_options(self) -> list[LaunchOption]:
        """The pool's own option first, then each fallback entry (missing keys inherited)."""
        subnet = self.effective_subnet_id
        options = [self._option(self.instance_type, self.instance_slots, subnet, self.spot)]
        for entry in self.fallback:
            if entry.instance_type is None or entry.instance_type == self.instance_type:
                itype = self.instance_type
                slots = (
                    entry.instance_slots
                    if entry.instance_slots is not None
                    else self.instance_slots
                )
            else:
                itype, slots = entry.instance_type, entry.instance_slots
            options.append(
                self._option(
                    itype,
                    slots,
                    entry.subnet_id or subnet,
                    self.spot if entry.spot is None else entry.spot,
                )
            )
        return options


def provider_config_types() -> tuple[type[ProvisionerConfig], ...]:
    """Every cloud's config model. Add a cloud here (GCP lives in ``gcp_config.py``)."""
    types: list[type[ProvisionerConfig]] = [AwsProviderConfig]
    try:
        from det.master.provisioner.gcp_config import GcpProviderConfig  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        pass
    else:
        types.append(GcpProviderConfig)
    return tuple(types)


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
