"""The cloud provider interface: the only thing the provisioner knows about a cloud.

One module per cloud implements it (``aws.py``, ``gcp.py``), importing its SDK lazily. The
provisioner loop calls it outside any database transaction.

Contract for every implementation:

* ``launch`` asks the cloud for ``count`` instances of one :class:`LaunchOption` and returns
  what the cloud accepted (possibly fewer). Every instance is tagged/labelled with the cluster
  id, the pool name and ``managed-by=det`` so :meth:`list_instances` can always find it again.
  A refusal raises :class:`LaunchError`; ``capacity=True`` marks errors where another option
  (instance type, zone, market) may succeed, so the decider moves down its fallback list.
* ``list_instances`` returns every non-terminated instance of this cluster and pool.
* ``terminate`` is idempotent: unknown or already-terminated ids are not errors.
* Only named transient errors are retried inside a call (with capped exponential backoff);
  everything else surfaces at once.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from typing import Protocol

from det.master.errors import MasterError


class InstanceState(enum.StrEnum):
    """A cloud machine's state as det sees it (each cloud's own states map onto these), stored
    in ``instances.state``. The master's alone: agents and the allocation states
    (:mod:`det.common.states`) know nothing of machines."""

    STARTING = "starting"  # pending / provisioning / staging
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    TERMINATING = "terminating"
    TERMINATED = "terminated"


class Market(enum.Enum):
    ON_DEMAND = "on_demand"
    SPOT = "spot"


@dataclasses.dataclass(frozen=True)
class LaunchOption:
    """One entry of a pool's ordered fallback list."""

    instance_type: str
    zone: str | None = None  # AWS: subnet id or availability zone; GCP: zone
    market: Market = Market.ON_DEMAND
    slots: int = 0  # slots one instance of this type provides
    # GCP attaches GPUs to a machine type separately (n1-standard-8 + 1 x nvidia-tesla-t4), so
    # two options may share a machine type and differ only here. AWS leaves them unset.
    accelerator_type: str | None = None
    accelerator_count: int = 0


@dataclasses.dataclass(frozen=True)
class Instance:
    id: str  # the cloud's instance id (AWS) or instance name (GCP); also the agent id
    state: InstanceState
    launched_at: dt.datetime
    instance_type: str
    zone: str | None = None
    market: Market = Market.ON_DEMAND
    address: str | None = None


# Refusals that mean the account's quota, not the cloud's capacity: retrying soon does not help
# (an increase is a request to the cloud, reviewed in hours or days), another option may (another
# family or region has its own quota). EC2: RunInstances' vCPU and spot-count limits; GCE: an
# operation's QUOTA_EXCEEDED and the HTTP reason quotaExceeded ("Quota 'CPUS' exceeded. Limit:
# 24.0 in region us-west1.").
QUOTA_CODES = frozenset(
    {
        "VcpuLimitExceeded",
        "MaxSpotInstanceCountExceeded",
        "InstanceLimitExceeded",
        "QUOTA_EXCEEDED",
        "quotaExceeded",
    }
)


def is_quota(code: str | None) -> bool:
    return code in QUOTA_CODES


class LaunchError(MasterError):
    """The cloud refused a launch.

    ``code`` is the cloud's own error code (``InsufficientInstanceCapacity``,
    ``ZONE_RESOURCE_POOL_EXHAUSTED``, ``VcpuLimitExceeded``…); ``capacity`` says whether another
    launch option may succeed where this one failed (true for quota refusals too: another option
    may have its own quota); :attr:`quota` tells quota from capacity.
    """

    def __init__(self, code: str, message: str, *, capacity: bool = False) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.capacity = capacity

    @property
    def quota(self) -> bool:
        return is_quota(self.code)


class Provider(Protocol):
    def launch(self, option: LaunchOption, count: int) -> list[Instance]: ...

    def list_instances(self) -> list[Instance]: ...

    def terminate(self, instance_ids: list[str]) -> None: ...
