"""The ``provider: {type: gcp, ...}`` block of a resource pool (Determined's master.yaml shape).

Determined's keys parse unchanged (``instance_type: {machine_type, gpu_type, gpu_num,
preemptible}``, ``boot_disk_*``, ``network_interface``, ``service_account``, ``label_key`` /
``label_value``, ``name_prefix``, ``base_config``…). Additions of ours:

* ``spot``: launch Spot VMs (``provisioning_model: SPOT``, deleted on preemption) rather than the
  legacy ``preemptible`` VMs.
* ``fallback``: where to go when GCE has no capacity: the same machine type in other ``zones``
  first, then the other ``instance_types``, and finally (``on_demand: true``) standard
  provisioning instead of Spot/preemptible. :meth:`GcpProviderConfig.launch_options` turns this
  into the ordered list the decider walks.

The shared provisioning keys (instance counts, idle/starting periods, launch error handling,
agent settings) are spelled out in :class:`SharedProvisioningFields` until the common base model
of ``det.master.provisioner.config`` exists; the field names follow Determined's.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any, Literal

from det.master.provisioner.provider import LaunchOption, Market
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: Any) -> Any:
    """Accept Go-style durations (``"20m"``, ``"1h30m"``, ``"45s"``) as Determined does.

    Numbers are seconds; anything else is left to pydantic's own timedelta parsing.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        return dt.timedelta(seconds=value)
    if isinstance(value, str):
        text = value.strip()
        parts = _DURATION_PART.findall(text)
        if parts and "".join(n + u for n, u in parts) == text:
            return dt.timedelta(seconds=sum(float(n) * _UNIT_SECONDS[u] for n, u in parts))
    return value


Duration = Annotated[dt.timedelta, BeforeValidator(parse_duration)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SharedProvisioningFields(_Model):
    """Keys every cloud provider block accepts (Determined's ``provconfig.Config``)."""

    master_url: str | None = None
    master_cert_name: str | None = None
    startup_script: str = ""
    container_startup_script: str = ""
    agent_docker_network: str = "default"
    agent_docker_runtime: str = "runc"
    agent_docker_image: str | None = None
    agent_fluent_image: str | None = None
    agent_reconnect_attempts: int = Field(default=5, ge=0)
    agent_reconnect_backoff: int = Field(default=5, ge=0)
    agent_config_file_contents: dict[str, Any] | None = None
    min_instances: int = Field(default=0, ge=0)
    max_instances: int = Field(default=5, ge=1)
    max_idle_agent_period: Duration = dt.timedelta(minutes=20)
    max_agent_starting_period: Duration = dt.timedelta(minutes=20)
    # How long and how many times a failing launch option is retried before the decider moves
    # on (Determined: ``error_timeout`` / ``num_retries``, accepted as aliases).
    launch_error_timeout: Duration = dt.timedelta(minutes=5)
    launch_error_retries: int = Field(default=3, ge=0)
    error_timeout: Duration | None = None
    num_retries: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _check_counts(self) -> SharedProvisioningFields:
        if self.max_instances < self.min_instances:
            raise ValueError("max_instances must be greater than or equal to min_instances")
        return self


class GcpInstanceType(_Model):
    """A machine type and the GPUs attached to it (Determined's ``instance_type``)."""

    machine_type: str = "n1-standard-32"
    gpu_type: str = "nvidia-tesla-t4"
    gpu_num: int = Field(default=4, ge=0, le=16)
    preemptible: bool = False

    @property
    def accelerator(self) -> tuple[str | None, int]:
        if self.gpu_type and self.gpu_num > 0:
            return self.gpu_type, self.gpu_num
        return None, 0


class GcpNetworkInterface(_Model):
    network: str = "global/networks/default"
    subnetwork: str | None = None
    external_ip: bool = False


class GcpServiceAccount(_Model):
    email: str
    scopes: list[str] = ["https://www.googleapis.com/auth/cloud-platform"]


class GcpFallback(_Model):
    zones: list[str] = []
    instance_types: list[GcpInstanceType] = []
    # After every Spot/preemptible option failed for capacity, try standard provisioning.
    on_demand: bool = False


class GcpProviderConfig(SharedProvisioningFields):
    type: Literal["gcp"] = "gcp"

    # Unset project/zone: the master's own (read from the metadata server when on GCE).
    project: str | None = None
    zone: str | None = None

    boot_disk_size: int = Field(default=200, ge=10, description="GB")
    boot_disk_source_image: str
    # A disk type name (``pd-ssd``) or URL (``projects/p/zones/z/diskTypes/pd-ssd``); only the
    # last path segment is used, so the same type works in every fallback zone.
    boot_disk_type: str = "pd-standard"

    labels: dict[str, str] = {}
    label_key: str = "managed-by"
    label_value: str | None = None
    name_prefix: str = "det-agent-"

    network_interface: GcpNetworkInterface = GcpNetworkInterface()
    network_tags: list[str] = []
    service_account: GcpServiceAccount | None = None

    instance_type: GcpInstanceType = GcpInstanceType()
    spot: bool = False
    preemptible: bool = False
    fallback: GcpFallback = GcpFallback()

    operation_timeout_period: Duration = dt.timedelta(minutes=5)
    cpu_slots_allowed: bool = False
    use_cloud_logging: bool = False
    # Extra Instance fields in the REST (camelCase) shape, e.g. {"minCpuPlatform": "..."};
    # our own fields are applied on top of it.
    base_config: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _check_gcp(self) -> GcpProviderConfig:
        if self.spot and self.wants_preemptible:
            raise ValueError(
                "spot and preemptible are exclusive: spot is the successor of preemptible VMs"
            )
        # GCE names: [a-z]([-a-z0-9]*[a-z0-9])?, at most 63 characters; we append 9.
        if not re.fullmatch(r"[a-z][-a-z0-9]{0,52}", self.name_prefix):
            raise ValueError(
                "name_prefix must start with a lowercase letter, use only a-z, 0-9 and '-', "
                "and be at most 53 characters"
            )
        return self

    @property
    def wants_preemptible(self) -> bool:
        return self.preemptible or self.instance_type.preemptible

    @property
    def interruptible(self) -> bool:
        """Whether the primary options run on Spot or preemptible capacity."""
        return self.spot or self.wants_preemptible

    def slots_for(self, instance_type: GcpInstanceType) -> int:
        if instance_type.gpu_num > 0 and instance_type.gpu_type:
            return instance_type.gpu_num
        return 1 if self.cpu_slots_allowed else 0

    def launch_options(self) -> list[LaunchOption]:
        """The pool's ordered fallback list: zones, then machine types, then on-demand."""
        zones = [self.zone, *[z for z in self.fallback.zones if z != self.zone]]
        types = [self.instance_type, *self.fallback.instance_types]
        markets = [Market.SPOT if self.interruptible else Market.ON_DEMAND]
        if self.interruptible and self.fallback.on_demand:
            markets.append(Market.ON_DEMAND)
        options: list[LaunchOption] = []
        for market in markets:
            for itype in types:
                gpu_type, gpu_num = itype.accelerator
                for zone in zones:
                    options.append(
                        LaunchOption(
                            instance_type=itype.machine_type,
                            zone=zone,
                            market=market,
                            slots=self.slots_for(itype),
                            accelerator_type=gpu_type,
                            accelerator_count=gpu_num,
                        )
                    )
        return options
