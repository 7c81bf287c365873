"""Determined's task list: the live allocations (trials and checkpoint-GC tasks) with where they
run, as ``GetTasks`` answers (``det task list``, ``det slot list``, ``det agent disable --drain``)."""

from __future__ import annotations

from typing import Any

from det.master.db import Conn
from det.master.wire import ts


def _name(row: dict[str, Any]) -> str:
    if row["trial_id"] is not None:
        return f"Trial {row['trial_id']} (Experiment {row['experiment_id']})"
    if row["gc_experiment_id"] is not None:
        return f"Checkpoint GC (Experiment {row['gc_experiment_id']})"
    return str(row["task_id"])


def live_allocations(conn: Conn) -> dict[str, dict[str, Any]]:
    """``allocationIdToSummary``: every allocation that has not terminated, by id."""
    rows = conn.execute(
        "SELECT a.*, t.experiment_id, g.experiment_id AS gc_experiment_id, j.priority"
        " FROM allocations a LEFT JOIN trials t ON t.id = a.trial_id"
        " LEFT JOIN checkpoint_gc g ON g.allocation_id = a.id"
        " LEFT JOIN jobs j ON j.id = a.job_id"
        " WHERE a.state <> 'TERMINATED' ORDER BY a.created_at, a.id"
    ).fetchall()
    slots = {
        (s["agent_id"], s["slot_id"]): s
        for s in conn.execute("SELECT agent_id, slot_id, type, uuid, brand FROM slots")
    }
    out = {}
    for r in rows:
        resources = []
        if r["placement"] is not None:
            devices = {}
            for agent_id, slot_ids in r["placement"].items():
                devices[agent_id] = {
                    "devices": [_device(slots.get((agent_id, str(s))), str(s)) for s in slot_ids]
                }
            resources.append(
                {
                    "resourcesId": r["id"],
                    "allocationId": r["id"],
                    "agentDevices": devices,
                    # the id det's agent listing gives the slot's container (det slot list joins them)
                    "containerId": r["container_id"] or r["id"],
                    "resourcesType": "docker-container",
                    "started": {} if r["started_at"] is not None else None,
                    "exited": None,
                }
            )
        out[r["id"]] = {
            "taskId": r["task_id"],
            "allocationId": r["id"],
            "name": _name(r),
            "registeredTime": ts(r["created_at"]),
            "resourcePool": r["resource_pool"],
            "slotsNeeded": r["slots_needed"],
            "resources": resources,
            "schedulerType": "priority",
            "priority": r["priority"],
            "proxyPorts": [],
        }
    return out


def _device(slot: dict[str, Any] | None, slot_id: str) -> dict[str, Any]:
    kind = (slot or {}).get("type") or "cpu"
    return {
        "id": int(slot_id) if slot_id.isdigit() else 0,
        "brand": (slot or {}).get("brand") or "",
        "uuid": (slot or {}).get("uuid") or "",
        "type": "TYPE_" + str(kind).upper(),
    }
