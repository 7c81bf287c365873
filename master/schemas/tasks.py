"""Tasks and allocations on the wire: ``v1AllocationSummary`` (``GetTasks``) from a live
allocation's row, and det's own allocation messages."""

from __future__ import annotations

from typing import NotRequired

from typing_extensions import TypedDict

from det.master.rows.agents import SlotDevice
from det.master.rows.tasks import AllocationSummaryRow
from det.master.schemas import d
from det.master.schemas.agents import device
from det.master.wire import ts


class ProxyTicketRequest(TypedDict):
    """det's ``POST /api/v1/proxy_tickets``: for which interactive task."""

    taskId: str


class ProxyTicket(TypedDict):
    """A minute's single-use ticket that opens the task's proxied page in a browser, and the
    URL that opens it on the task's own origin."""

    ticket: str
    url: str


class PendingPreemption(TypedDict):
    """det's ``GET .../signals/pending_preemption``: whether a preemption is pending."""

    preempt: bool


def _name(row: AllocationSummaryRow) -> str:
    if row.trial_id is not None:
        return f"Trial {row.trial_id} (Experiment {row.experiment_id})"
    if row.gc_experiment_id is not None:
        return f"Checkpoint GC (Experiment {row.gc_experiment_id})"
    if row.ntsc_description:
        return row.ntsc_description
    return row.task_id


def allocation_summary(
    r: AllocationSummaryRow, slots: dict[tuple[str, str], SlotDevice]
) -> d.v1AllocationSummary:
    """``r``: a live allocation (``services.tasks.live_allocations``); ``slots`` the ``slots``
    rows by (agent, slot id)."""
    resources: list[d.v1ResourcesSummary] = []
    if r.placement is not None:
        devices: dict[str, d.ResourcesSummaryDevices] = {}
        for agent_id, slot_ids in r.placement.items():
            devices[agent_id] = {
                "devices": [device(slots.get((agent_id, str(s))), str(s)) for s in slot_ids]
            }
        resources.append(
            {
                "resourcesId": r.id,
                "allocationId": r.id,
                "agentDevices": devices,
                # the id det's agent listing gives the slot's container (det slot list joins them)
                "containerId": r.container_id or r.id,
                "resourcesType": "docker-container",
                "started": {} if r.started_at is not None else None,
                "exited": None,
            }
        )
    return {
        "taskId": r.task_id,
        "allocationId": r.id,
        "name": _name(r),
        "registeredTime": ts(r.created_at),
        "resourcePool": r.resource_pool,
        "slotsNeeded": r.slots_needed,
        "resources": resources,
        "schedulerType": "priority",
        "priority": r.priority,
        "proxyPorts": [],
    }


class LegacyTaskLog(TypedDict):
    """One line of Determined's ``POST /task-logs`` (its unmanaged log shipper's format)."""

    task_id: str
    log: str
    timestamp: NotRequired[str | None]
    rank: NotRequired[str | None]
