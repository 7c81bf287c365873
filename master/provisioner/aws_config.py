"""The ``provider: {type: aws, ...}`` block of a resource pool (Determined's master.yaml
shape, plus ``fallback`` and ``endpoint_url``)."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Literal

import pydantic
from pydantic import Field, model_validator

from det.master.provisioner import instance_types
from det.master.provisioner.config_base import FallbackEntry, ProvisionerConfig, _Model
from det.master.provisioner.provider import LaunchOption, Market


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
