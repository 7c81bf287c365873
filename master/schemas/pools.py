"""Resource pools on the wire: Determined's ``v1ResourcePool`` (configuration plus live slot
counts)."""

from __future__ import annotations

from typing import Any

from det.master.schemas import d

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
    counts: dict[str, Any],
    used: int,
    default_compute: bool,
    default_aux: bool,
    master_url: str,
    cluster_name: str,
) -> d.v1ResourcePool:
    """``p`` is the pool's config, ``scheduler`` its (or the resource manager's) scheduler
    config, ``counts`` the pool's live agents/slots row (empty when none)."""
    from det.master.schemas.agents import device_type

    provider = p.provider or {}
    agents = int(counts.get("agents") or 0)
    return {
        "name": p.pool_name,
        "description": p.description,
        "type": _POOL_TYPE.get(str(provider.get("type")), "RESOURCE_POOL_TYPE_STATIC"),
        "numAgents": agents,
        "slotsAvailable": int(counts.get("slots") or 0),
        "slotsUsed": used,
        "slotType": device_type(counts.get("slot_type")),
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
