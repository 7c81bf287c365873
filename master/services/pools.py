"""Resource pools as Determined's ``v1ResourcePool`` (configuration plus live slot counts)."""

from __future__ import annotations

from typing import Any

from det.master.db import Conn
from det.master.state import MasterState

_SCHEDULER = {
    "priority": "SCHEDULER_TYPE_PRIORITY",
    "fair_share": "SCHEDULER_TYPE_FAIR_SHARE",
    "round_robin": "SCHEDULER_TYPE_ROUND_ROBIN",
}


def list_pools(conn: Conn, st: MasterState) -> list[dict[str, Any]]:
    counts = {
        r["resource_pool"]: r
        for r in conn.execute(
            "SELECT a.resource_pool, count(DISTINCT a.id) AS agents, count(s.slot_id) FILTER (WHERE s.enabled) AS slots,"
            " max(s.type) AS slot_type FROM agents a LEFT JOIN slots s ON s.agent_id = a.id"
            " WHERE a.connected GROUP BY a.resource_pool"
        )
    }
    used = {
        r["resource_pool"]: int(r["used"])
        for r in conn.execute(
            "SELECT resource_pool, coalesce(sum(slots_needed), 0) AS used FROM allocations"
            " WHERE state NOT IN ('PENDING','TERMINATED') GROUP BY resource_pool"
        )
    }
    rm = st.config.resource_manager
    out = []
    for p in st.config.resource_pools:
        c = counts.get(p.pool_name) or {}
        sched = p.scheduler or rm.scheduler
        provider = p.provider or {}
        kind = provider.get("type")
        out.append(
            {
                "name": p.pool_name,
                "description": p.description,
                "type": {"aws": "RESOURCE_POOL_TYPE_AWS", "gcp": "RESOURCE_POOL_TYPE_GCP"}.get(
                    str(kind), "RESOURCE_POOL_TYPE_STATIC"
                ),
                "numAgents": int(c.get("agents") or 0),
                "slotsAvailable": int(c.get("slots") or 0),
                "slotsUsed": used.get(p.pool_name, 0),
                "slotType": "TYPE_" + str(c.get("slot_type") or "cpu").upper(),
                "auxContainerCapacity": p.max_aux_containers_per_agent * int(c.get("agents") or 0),
                "auxContainersRunning": 0,
                "auxContainerCapacityPerAgent": p.max_aux_containers_per_agent,
                "defaultComputePool": p.pool_name == rm.default_compute_resource_pool,
                "defaultAuxPool": p.pool_name == rm.default_aux_resource_pool,
                "preemptible": bool(provider.get("spot") or provider.get("preemptible")),
                "minAgents": int(provider.get("min_instances") or 0),
                "maxAgents": int(provider.get("max_instances") or 0),
                "slotsPerAgent": int(provider.get("instance_slots") or 0),
                "instanceType": str(provider.get("instance_type") or ""),
                "imageId": str(provider.get("image_id") or ""),
                "location": str(provider.get("region") or provider.get("zone") or ""),
                "masterUrl": st.config.url(),
                "masterCertName": "",
                "startupScript": "",
                "containerStartupScript": "",
                "agentDockerNetwork": "host",
                "agentDockerRuntime": "runc",
                "agentDockerImage": "",
                "agentFluentImage": "",
                "maxIdleAgentPeriod": float(0),
                "maxAgentStartingPeriod": float(0),
                "schedulerType": _SCHEDULER.get(sched.type, "SCHEDULER_TYPE_PRIORITY"),
                "schedulerFittingPolicy": "FITTING_POLICY_BEST",
                "clusterName": st.config.cluster_name,
                "resourceManagerMetadata": {},
                "details": {
                    "priorityScheduler": {
                        "preemption": sched.preemption,
                        "defaultPriority": sched.default_priority,
                    }
                },
                "accelerator": "",
                "stats": None,
            }
        )
    return out
