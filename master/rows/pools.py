"""The rows of resource pools: their cloud instances and events."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from typing_extensions import TypedDict


class PoolEventRow(TypedDict):
    """An ``events`` row of a pool (``schemas.pools.pool_event``)."""

    id: int
    kind: str
    message: str
    created_at: dt.datetime


class InstanceRow(TypedDict):
    """An ``instances`` row (``schemas.pools.pool_instance``)."""

    id: str
    resource_pool: str
    instance_type: str
    zone: str | None
    market: str
    state: str
    launched_at: dt.datetime
    terminated_at: dt.datetime | None
    reason: str | None
    option_index: int | None


@dataclass(frozen=True)
class PoolCounts:
    """A pool's connected agents and their enabled slots (``services.pools.list_pools``)."""

    resource_pool: str
    agents: int
    slots: int
    #: The slots' device type (None: no slots).
    slot_type: str | None
