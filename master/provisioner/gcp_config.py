"""The ``provider: {type: gcp, ...}`` block of a resource pool (Determined's master.yaml shape).

Determined's keys parse unchanged (``instance_type: {machine_type, gpu_type, gpu_num,
preemptible}``, ``boot_disk_*``, ``network_interface``, ``service_account``, ``label_key`` /
``label_value``, ``name_prefix``, ``base_config``…); the shared provisioning keys come from
:class:`det.master.provisioner.config.ProvisionerConfig`. Additions of ours:

* ``spot``: launch Spot VMs (``provisioning_model: SPOT``, deleted on preemption) rather than the
  legacy ``preemptible`` VMs (``preemptible: true``, or Determined's
  ``instance_type.preemptible``).
* ``fallback``: an ordered list of entries tried when GCE has no capacity for the pool's own
  option, each overriding some of ``zone``, ``instance_type`` and ``spot`` (unset keys inherit
  the pool's values), e.g. another zone, then a smaller machine, then ``spot: false`` (standard
  provisioning). :meth:`GcpProviderConfig.launch_options` turns it into the decider's list.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from det.common.jsontypes import JSONObject
from det.master.provisioner.config_base import Duration, ProvisionerConfig
from det.master.provisioner.provider import LaunchOption, Market


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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


class GcpFallbackEntry(_Model):
    """One entry of the ordered fallback list; unset keys inherit the pool's own values."""

    zone: str | None = None
    instance_type: GcpInstanceType | None = None
    # true: the pool's interruptible model (Spot, or preemptible if the pool uses that);
    # false: standard provisioning.
    spot: bool | None = None


# mypy cannot follow setup.py's folder-to-namespace mapping, so det.* imports are Any to it.
class GcpProviderConfig(ProvisionerConfig):  # type: ignore[misc]
    """``provider: {type: gcp, ...}``."""

    type: Literal["gcp"]

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
    fallback: list[GcpFallbackEntry] = []

    operation_timeout_period: Duration = dt.timedelta(minutes=5)
    # Ours: an explicit Compute API endpoint (an emulator in tests: "http://127.0.0.1:PORT";
    # a plain-http endpoint is used with anonymous credentials).
    endpoint_url: str | None = None
    cpu_slots_allowed: bool = False
    use_cloud_logging: bool = False
    # Extra Instance fields in the REST (camelCase) shape, e.g. {"minCpuPlatform": "..."};
    # our own fields are applied on top of it.
    base_config: JSONObject | None = None

    @model_validator(mode="after")
    def _check_gcp(self) -> GcpProviderConfig:
        if self.spot and self.wants_preemptible:
            raise ValueError(
                "spot: cannot be combined with preemptible (Spot VMs succeed preemptible VMs)"
            )
        # GCE names: [a-z]([-a-z0-9]*[a-z0-9])?, at most 63 characters; we append 9.
        if not re.fullmatch(r"[a-z][-a-z0-9]{0,52}", self.name_prefix):
            raise ValueError(
                "name_prefix: must start with a lowercase letter, use only a-z, 0-9 and '-', "
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
        """The pool's own option first, then each fallback entry (missing keys inherited)."""
        entries = [GcpFallbackEntry(), *self.fallback]
        options = []
        for entry in entries:
            itype = entry.instance_type or self.instance_type
            spot = self.interruptible if entry.spot is None else entry.spot
            gpu_type, gpu_num = itype.accelerator
            options.append(
                LaunchOption(
                    instance_type=itype.machine_type,
                    zone=entry.zone or self.zone,
                    market=Market.SPOT if spot else Market.ON_DEMAND,
                    slots=self.slots_for(itype),
                    accelerator_type=gpu_type,
                    accelerator_count=gpu_num,
                )
            )
        return options
