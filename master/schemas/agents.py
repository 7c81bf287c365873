"""Agents and slots on the wire: ``v1Agent``, ``v1Slot``, ``v1SlotStats`` from the rows of
``services.agents.list_agents``. det's own heartbeat messages (agent <-> master) are shared with
the agent: :mod:`det.common.agent_protocol`."""

from __future__ import annotations

from typing import NotRequired

from typing_extensions import TypedDict

from det.common.jsontypes import JSONObject
from det.master.rows.agents import Agent as AgentRow
from det.master.rows.agents import SlotDevice, SlotRow
from det.master.schemas import d
from det.master.wire import ts

# det's allocation states as Determined's container states. TERMINATING is det's own: to the
# official client a container that is being stopped is still running.
_CONTAINER_STATE: dict[str, d.containerv1State] = {
    "ASSIGNED": "STATE_ASSIGNED",
    "PULLING": "STATE_PULLING",
    "STARTING": "STATE_STARTING",
    "RUNNING": "STATE_RUNNING",
    "TERMINATING": "STATE_RUNNING",
    "TERMINATED": "STATE_TERMINATED",
}
_DEVICE_TYPE: dict[str, d.devicev1Type] = {
    "cpu": "TYPE_CPU",
    "cuda": "TYPE_CUDA",
    "gpu": "TYPE_CUDA",
    "rocm": "TYPE_ROCM",
}


def container_state(state: str) -> d.containerv1State:
    return _CONTAINER_STATE.get(state, "STATE_UNSPECIFIED")


def device_type(kind: str | None) -> d.devicev1Type:
    return _DEVICE_TYPE.get(str(kind or "cpu").lower(), "TYPE_UNSPECIFIED")


def device(slot: SlotDevice | None, slot_id: str) -> d.v1Device:
    """``slot`` is a ``slots`` row (None when the agent no longer reports it)."""
    return {
        "id": int(slot_id) if slot_id.isdigit() else 0,
        "brand": (slot["brand"] if slot else "") or "",
        "uuid": (slot["uuid"] if slot else None) or "",
        "type": device_type(slot["type"] if slot else None),
    }


class Agent(d.v1Agent, total=False):
    """``v1Agent`` with det's additions (the official client ignores unknown keys)."""

    lastHeartbeat: str | None
    connected: bool
    label: str
    labels: JSONObject
    preemptionNotice: JSONObject | None


class GetAgentsResponse(TypedDict):
    agents: list[Agent]
    pagination: d.v1Pagination


class GetAgentResponse(TypedDict):
    agent: Agent


class EnableAgentResponse(TypedDict):
    agent: NotRequired[Agent | None]


def slot(agent: AgentRow, s: SlotRow) -> d.v1Slot:
    alloc = agent["used"].get(s["slot_id"])
    container: d.v1Container | None = None
    if alloc is not None:
        container = {
            "id": alloc["container_id"] or alloc["id"],
            "state": container_state(alloc["state"]),
            "parent": alloc["id"],
            "devices": [],
        }
    return {
        "id": s["slot_id"],
        "device": device(s, s["slot_id"]),
        "enabled": s["enabled"],
        "draining": agent["draining"],
        "container": container,
    }


def slot_stats(slots: list[d.v1Slot]) -> d.v1SlotStats:
    """Per device type and per brand: how many slots, how many disabled or draining, and how
    many containers in each state."""
    stats: d.v1SlotStats = {"typeStats": {}, "brandStats": {}}
    for s in slots:
        dev = s.get("device") or {}
        keys = (
            (stats["typeStats"], str(dev.get("type") or "TYPE_UNSPECIFIED")),
            (stats["brandStats"], str(dev.get("brand") or "")),
        )
        for group, key in keys:
            entry = group.setdefault(key, {"total": 0, "disabled": 0, "draining": 0, "states": {}})
            entry["total"] += 1
            entry["disabled"] += 0 if s.get("enabled") else 1
            entry["draining"] += 1 if s.get("draining") else 0
            container = s.get("container")
            if container is not None:
                states = entry.get("states") or {}
                states[container["state"]] = states.get(container["state"], 0) + 1
                entry["states"] = states
    return stats


def agent(a: AgentRow) -> Agent:
    """``a`` is an agent of ``services.agents.list_agents`` (with its ``slots`` and ``used``)."""
    slots = {f"/agents/{a['id']}/slots/{s['slot_id']}": slot(a, s) for s in a["slots"]}
    containers: dict[str, d.v1Container] = {}
    for alloc in {x["id"]: x for x in a["used"].values()}.values():
        containers[alloc["container_id"] or alloc["id"]] = {
            "id": alloc["container_id"] or alloc["id"],
            "state": container_state(alloc["state"]),
            "parent": alloc["id"],
        }
    return {
        "id": a["id"],
        "registeredTime": ts(a["registered_at"]),
        "lastHeartbeat": ts(a["last_heartbeat"]),
        "connected": a["connected"],
        "slots": slots,
        "containers": containers,
        "resourcePools": [a["resource_pool"]],
        "addresses": a["addresses"],
        "enabled": a["enabled"],
        "draining": a["draining"],
        "version": a["version"],
        "label": "",
        "labels": a["labels"],
        "preemptionNotice": a["preemption_notice"],
        "slotStats": slot_stats(list(slots.values())),
    }
