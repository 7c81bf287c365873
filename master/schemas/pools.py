"""Resource pools on the wire: Determined's ``v1ResourcePool`` (configuration plus live slot
counts)."""

from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict

from det.master.rows.pools import InstanceRow, PoolCounts, PoolEventRow
from det.master.schemas import d
from det.master.schemas._types import Int64
from det.master.schemas.agents import device_type

_SCHEDULER: dict[str, d.v1SchedulerType] = {
    "priority": "SCHEDULER_TYPE_PRIORITY",
    "fair_share": "SCHEDULER_TYPE_FAIR_SHARE",
    "round_robin": "SCHEDULER_TYPE_ROUND_ROBIN",
}
_POOL_TYPE: dict[str, d.v1ResourcePoolType] = {
    "aws": "RESOURCE_POOL_TYPE_AWS",
    "gcp": "RESOURCE_POOL_TYPE_GCP",
}


def resource_pool(
    p: Any,
    *,
    scheduler: Any,
    counts: PoolCounts | None,
    used: int,
    default_compute: bool,
    default_aux: bool,
    master_url: str,
    cluster_name: str,
) -> d.v1ResourcePool:
    """``p`` is the pool's config, ``scheduler`` its (or the resource manager's) scheduler
    config, ``counts`` the pool's live agents and slots (None when it has no agent connected)."""
    provider = p.provider or {}
    agents = counts.agents if counts else 0
    return {
        "name": p.pool_name,
        "description": p.description,
        "type": _POOL_TYPE.get(str(provider.get("type")), "RESOURCE_POOL_TYPE_STATIC"),
        "numAgents": agents,
        "slotsAvailable": counts.slots if counts else 0,
        "slotsUsed": used,
        "slotType": device_type(counts.slot_type if counts else None),
        "auxContainerCapacity": p.max_aux_containers_per_agent * agents,
        "auxContainersRunning": 0,
        "auxContainerCapacityPerAgent": p.max_aux_containers_per_agent,
        "defaultComputePool": default_compute,
        "defaultAuxPool": default_aux,
        "preemptible": bool(provider.get("spot") or provider.get("preemptible")),
        "minAgents": int(provider.get("min_instances") or 0),
        "maxAgents": int(provider.get("max_instances") or 0),
        "slotsPerAgent": int(provider.get("instance_slots") or 0),
        "instanceType": str(provider.get("instance_type") or ""),
        "imageId": str(provider.get("image_id") or ""),
        "location": str(provider.get("region") or provider.get("zone") or ""),
        "masterUrl": master_url,
        "masterCertName": "",
        "startupScript": "",
        "containerStartupScript": "",
        "agentDockerNetwork": "host",
        "agentDockerRuntime": "runc",
        "agentDockerImage": "",
        "agentFluentImage": "",
        "maxIdleAgentPeriod": 0.0,
        "maxAgentStartingPeriod": 0.0,
        "schedulerType": _SCHEDULER.get(scheduler.type, "SCHEDULER_TYPE_PRIORITY"),
        "schedulerFittingPolicy": "FITTING_POLICY_BEST",
        "clusterName": cluster_name,
        "resourceManagerMetadata": {},
        "details": {
            "priorityScheduler": {
                "preemption": scheduler.preemption,
                "defaultPriority": scheduler.default_priority,
            }
        },
        "accelerator": "",
        "stats": None,
    }


# det's own autoscaling views of a pool (``/api/v1/resource-pools/{name}/events|instances|cost``).


class PoolEvent(TypedDict):
    id: int
    kind: str
    message: str
    time: str


class PoolEventsParams(TypedDict, total=False):
    limit: Int64 | None  # the newest N (clamped to 1..1000; default 100)


class PoolEventsResponse(TypedDict):
    events: list[PoolEvent]


class PoolInstance(TypedDict):
    id: str
    instanceType: str
    zone: str | None
    market: str
    state: str
    launchedAt: str
    terminatedAt: str | None
    reason: str | None
    optionIndex: int | None


class PoolInstancesResponse(TypedDict):
    instances: list[PoolInstance]


class InstanceCost(TypedDict):
    id: str
    instanceType: str
    market: str
    hourlyPrice: float
    hoursThisMonth: float
    costThisMonth: float
    running: bool


class PoolCostResponse(TypedDict):
    currency: str
    periodStart: str
    hourlyRate: float
    spentThisMonth: float
    maxHourlyCost: float | None
    monthlyBudget: float | None
    instances: list[InstanceCost]


def pool_event(r: PoolEventRow) -> PoolEvent:
    """``r`` is an ``events`` row of the pool."""
    return {
        "id": r["id"],
        "kind": r["kind"],
        "message": r["message"],
        "time": r["created_at"].isoformat(),
    }


def pool_instance(r: InstanceRow) -> PoolInstance:
    """``r`` is an ``instances`` row."""
    return {
        "id": r["id"],
        "instanceType": r["instance_type"],
        "zone": r["zone"],
        "market": r["market"],
        "state": r["state"],
        "launchedAt": r["launched_at"].isoformat(),
        "terminatedAt": r["terminated_at"].isoformat() if r["terminated_at"] else None,
        "reason": r["reason"],
        "optionIndex": r["option_index"],
    }
