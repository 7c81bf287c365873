"""Agents: the heartbeat protocol (docs/internals.md) and ``det agent``/``det slot`` views."""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from det.master.api._common import AGENT, allow, body, db, require_admin, state
from det.master.services import agents as svc
from det.master.wire import ts

bp = Blueprint("agents", __name__)


@bp.post("/api/v1/agents/<agent_id>/heartbeat")
@allow(AGENT)
def heartbeat(agent_id: str) -> Any:
    with db() as conn:
        return svc.heartbeat(conn, state(), agent_id, body())


def _slot_json(agent: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    alloc = agent["used"].get(s["slot_id"])
    container = None
    if alloc is not None:
        container = {
            "id": alloc["container_id"] or alloc["id"],
            "state": "STATE_" + alloc["state"],
            "parent": alloc["id"],
            "devices": [],
        }
    return {
        "id": s["slot_id"],
        "device": {
            "id": int(s["slot_id"]) if s["slot_id"].isdigit() else 0,
            "brand": s["brand"],
            "uuid": s["uuid"] or "",
            "type": "TYPE_" + s["type"].upper(),
        },
        "enabled": s["enabled"],
        "draining": agent["draining"],
        "container": container,
    }


def slot_stats(slots: list[dict[str, Any]]) -> dict[str, Any]:
    """Determined's v1SlotStats: per device type and per brand, how many slots, how many
    disabled or draining, and how many containers in each state."""
    stats: dict[str, dict[str, dict[str, Any]]] = {"typeStats": {}, "brandStats": {}}
    for s in slots:
        keys = (("typeStats", s["device"]["type"]), ("brandStats", s["device"]["brand"]))
        for group, key in keys:
            d = stats[group].setdefault(
                key, {"total": 0, "disabled": 0, "draining": 0, "states": {}}
            )
            d["total"] += 1
            d["disabled"] += 0 if s["enabled"] else 1
            d["draining"] += 1 if s["draining"] else 0
            if s["container"] is not None:
                state = s["container"]["state"]
                d["states"][state] = d["states"].get(state, 0) + 1
    return stats


def agent_json(a: dict[str, Any]) -> dict[str, Any]:
    slots = {f"/agents/{a['id']}/slots/{s['slot_id']}": _slot_json(a, s) for s in a["slots"]}
    containers = {}
    for alloc in {x["id"]: x for x in a["used"].values()}.values():
        containers[alloc["container_id"] or alloc["id"]] = {
            "id": alloc["container_id"] or alloc["id"],
            "state": "STATE_" + alloc["state"],
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


@bp.get("/api/v1/agents")
def list_() -> Any:
    with db() as conn:
        agents = svc.list_agents(conn)
    return {
        "agents": [agent_json(a) for a in agents if a["connected"]],
        "pagination": {
            "offset": 0,
            "limit": 0,
            "startIndex": 0,
            "endIndex": len(agents),
            "total": len(agents),
        },
    }


@bp.get("/api/v1/agents/<agent_id>")
def get(agent_id: str) -> Any:
    from det.master.errors import NotFound

    with db() as conn:
        found = [a for a in svc.list_agents(conn) if a["id"] == agent_id]
    if not found:
        raise NotFound(f"agent {agent_id} not found")
    return {"agent": agent_json(found[0])}


@bp.post("/api/v1/agents/<agent_id>/enable")
def enable(agent_id: str) -> Any:
    require_admin()
    with db() as conn:
        svc.set_enabled(conn, agent_id, True)
    return {}


@bp.post("/api/v1/agents/<agent_id>/disable")
def disable(agent_id: str) -> Any:
    require_admin()
    drain = bool(body().get("drain"))
    with db() as conn:
        svc.set_enabled(conn, agent_id, False, drain)
    return {}


@bp.post("/api/v1/agents/<agent_id>/slots/<slot_id>/enable")
def enable_slot(agent_id: str, slot_id: str) -> Any:
    require_admin()
    with db() as conn:
        svc.set_slot_enabled(conn, agent_id, slot_id, True)
    return {}


@bp.post("/api/v1/agents/<agent_id>/slots/<slot_id>/disable")
def disable_slot(agent_id: str, slot_id: str) -> Any:
    require_admin()
    with db() as conn:
        svc.set_slot_enabled(conn, agent_id, slot_id, False)
    return {}
