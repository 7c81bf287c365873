"""The rows of agents and their slots, as services read them and schemas send them."""

from __future__ import annotations

import datetime as dt

from typing_extensions import TypedDict

from det.common.jsontypes import JSONObject


class SlotDevice(TypedDict):
    """What a slot's device is (``schemas.agents.device``)."""

    type: str
    uuid: str | None
    brand: str


class SlotRow(SlotDevice):
    """A ``slots`` row."""

    agent_id: str
    slot_id: str
    memory_mb: int
    enabled: bool


class LiveAllocation(TypedDict):
    """An allocation placed on agents that has not ended."""

    id: str
    placement: dict[str, list[str]] | None
    state: str
    task_id: str
    container_id: str | None


class AgentRow(TypedDict):
    """An ``agents`` row."""

    id: str
    resource_pool: str
    version: str
    labels: JSONObject
    addresses: list[str]
    enabled: bool
    draining: bool
    preemption_notice: JSONObject | None
    registered_at: dt.datetime
    last_heartbeat: dt.datetime
    connected: bool


class Agent(AgentRow):
    """An agent as it is shown (``schemas.agents.agent``): its slots, and the live allocation
    on each slot that has one (by slot id)."""

    slots: list[SlotRow]
    used: dict[str, LiveAllocation]
