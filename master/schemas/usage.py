"""Usage and cost reports on the wire: Determined's ``ResourceAllocationRaw`` and
``ResourceAllocationAggregated`` answers, with det's fields beside theirs (dollars, workspace,
experiment; Determined's clients read their own fields and skip these), and det's own
per-experiment cost (``GET /api/v1/experiments/{id}/cost``)."""

from __future__ import annotations

import datetime as dt
from typing import NotRequired

from typing_extensions import TypedDict

from det.master import usage
from det.master.schemas import d
from det.master.schemas._types import Int64

CURRENCY = "USD"


class RawParams(TypedDict, total=False):
    """Determined's names, and the snake_case ones its CLI sends (grpc-gateway took both)."""

    timestampAfter: str
    timestampBefore: str
    timestamp_after: str
    timestamp_before: str


class AggregatedParams(TypedDict, total=False):
    startDate: str
    endDate: str
    period: str
    start_date: str
    end_date: str


class RawEntry(d.v1ResourceAllocationRawEntry, total=False):
    """One allocation clipped to the window (``kind``: its task's type), or one cloud instance
    (``kind`` ``instance``, ``username`` its id, as Determined lists them). ``costUsd`` is None
    where the pool has no prices."""

    allocationId: str
    taskId: str
    trialId: Int64 | None
    resourcePool: str
    workspace: str
    instanceType: str
    market: str
    costUsd: float | None
    spotUsd: float | None
    onDemandUsd: float | None


class RawResponse(TypedDict):
    resourceEntries: list[RawEntry]


class Dollars(TypedDict):
    usd: float
    spotUsd: float
    onDemandUsd: float


class AggregatedCost(TypedDict):
    """Dollars of the period (priced pools only: None when nothing in it ran where there is a
    price), by the entry's dimensions (priced keys only); ``idleUsd``: what the pools' cloud
    instances cost that no task held (None: no priced instance ran)."""

    currency: str
    usd: float | None
    spotUsd: float | None
    onDemandUsd: float | None
    idleUsd: float | None
    byUsername: dict[str, Dollars]
    byExperimentLabel: dict[str, Dollars]
    byResourcePool: dict[str, Dollars]
    byWorkspace: dict[str, Dollars]
    byExperiment: dict[str, Dollars]
    idleByResourcePool: dict[str, float]


class AggregatedEntry(d.v1ResourceAllocationAggregatedEntry):
    byWorkspace: NotRequired[dict[str, float]]
    byExperiment: NotRequired[dict[str, float]]
    cost: NotRequired[AggregatedCost]


class AggregatedResponse(TypedDict):
    resourceEntries: list[AggregatedEntry]


class TrialCost(TypedDict):
    trialId: Int64
    slotHours: float
    usd: float | None
    spotUsd: float | None
    onDemandUsd: float | None


class ExperimentCostResponse(TypedDict):
    """What an experiment's trials (and its checkpoint GC) held and cost, over its whole life.
    Dollars are None when none of it ran on a machine with a price."""

    experimentId: Int64
    currency: str
    slotHours: float
    usd: float | None
    spotUsd: float | None
    onDemandUsd: float | None
    trials: list[TrialCost]


def dollars(f: usage.Figures) -> Dollars:
    return {"usd": f.usd, "spotUsd": f.spot_usd, "onDemandUsd": f.on_demand_usd}


_PERIOD: dict[bool, d.v1ResourceAllocationAggregationPeriod] = {
    False: "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY",
    True: "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_MONTHLY",
}

_WIRE_DIMENSION = {
    "username": "byUsername",
    "experiment_label": "byExperimentLabel",
    "resource_pool": "byResourcePool",
    "workspace": "byWorkspace",
    "experiment": "byExperiment",
}


def aggregated_entry(p: usage.Period, monthly: bool) -> AggregatedEntry:
    by = p.by
    idle = p.idle_usd

    def priced(dim: str) -> dict[str, Dollars]:
        return {k: dollars(f) for k, f in sorted(by[dim].items()) if f.priced}

    def seconds(dim: str) -> dict[str, float]:
        return {k: f.slot_seconds for k, f in sorted(by[dim].items())}

    return {
        "periodStart": p.label,
        "period": _PERIOD[monthly],
        "seconds": p.total.slot_seconds,
        "byUsername": seconds("username"),
        "byExperimentLabel": seconds("experiment_label"),
        "byResourcePool": seconds("resource_pool"),
        "byWorkspace": seconds("workspace"),
        "byExperiment": seconds("experiment"),
        "cost": {
            "currency": CURRENCY,
            "usd": p.total.usd if p.total.priced else None,
            "spotUsd": p.total.spot_usd if p.total.priced else None,
            "onDemandUsd": p.total.on_demand_usd if p.total.priced else None,
            "idleUsd": sum(idle.values()) if idle else None,
            "byUsername": priced("username"),
            "byExperimentLabel": priced("experiment_label"),
            "byResourcePool": priced("resource_pool"),
            "byWorkspace": priced("workspace"),
            "byExperiment": priced("experiment"),
            "idleByResourcePool": idle,
        },
    }


def wire_time(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def raw_entry(u: usage.Use) -> RawEntry:
    h, f = u.hold, u.figures
    out: RawEntry = {
        "kind": h.kind,
        "username": h.username,
        "labels": list(h.labels),
        "slots": h.slots,
        "startTime": wire_time(u.start),
        "endTime": wire_time(u.end),
        "seconds": u.seconds,
        "allocationId": h.allocation_id,
        "taskId": h.task_id,
        "trialId": h.trial_id,
        "resourcePool": h.pool,
        "workspace": h.workspace,
        "costUsd": f.usd if f.priced else None,
        "spotUsd": f.spot_usd if f.priced else None,
        "onDemandUsd": f.on_demand_usd if f.priced else None,
    }
    if h.experiment_id is not None:
        out["experimentId"] = h.experiment_id
    if h.user_id is not None:
        out["userId"] = h.user_id
    return out


def machine_entry(
    m: usage.Machine, start: dt.datetime, end: dt.datetime, seconds: float, usd: float
) -> RawEntry:
    priced = m.hourly_usd is not None
    return {
        "kind": "instance",
        "username": m.id,
        "labels": [],
        "slots": m.slots,
        "startTime": wire_time(start),
        "endTime": wire_time(end),
        "seconds": seconds,
        "resourcePool": m.pool,
        "instanceType": m.instance_type,
        "market": m.market.value,
        "costUsd": usd if priced else None,
        "spotUsd": (usd if m.market.value == "spot" else 0.0) if priced else None,
        "onDemandUsd": (usd if m.market.value != "spot" else 0.0) if priced else None,
    }
