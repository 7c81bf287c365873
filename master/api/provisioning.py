"""Autoscaling views: a resource pool's provisioner events, its cloud instances and their cost."""

from __future__ import annotations

import datetime as dt

from flask import Blueprint

from det.master.api._common import Conn, db, state
from det.master.api._contract import contract
from det.master.errors import NotFound
from det.master.provisioner import cost
from det.master.schemas import pools as wire
from det.master.services import provisioning

bp = Blueprint("provisioning", __name__)


def pool_events_of(conn: Conn, pool: str, limit: int = 100) -> list[wire.PoolEvent]:
    return [wire.pool_event(r) for r in provisioning.pool_events(conn, pool, limit)]


def pool_instances_of(conn: Conn, pool: str) -> list[wire.PoolInstance]:
    return [wire.pool_instance(r) for r in provisioning.pool_instances(conn, pool)]


def _check_pool(name: str) -> None:
    if state().config.pool(name) is None:
        raise NotFound(f"no resource pool named '{name}'")


@bp.get("/api/v1/resource-pools/<name>/events")
@contract(params=wire.PoolEventsParams, response=wire.PoolEventsResponse)
def pool_events(name: str, params: wire.PoolEventsParams) -> wire.PoolEventsResponse:
    """Why the pool launched, terminated or is waiting, oldest first (``limit``: newest N)."""
    _check_pool(name)
    raw = params.get("limit")
    limit = max(1, min(100 if raw is None else raw, 1000))
    with db() as conn:
        return {"events": pool_events_of(conn, name, limit)}


@bp.get("/api/v1/resource-pools/<name>/instances")
@contract(response=wire.PoolInstancesResponse)
def pool_instances(name: str) -> wire.PoolInstancesResponse:
    """Every instance the provisioner has seen in this pool, ended ones included."""
    _check_pool(name)
    with db() as conn:
        return {"instances": pool_instances_of(conn, name)}


@bp.get("/api/v1/resource-pools/<name>/cost")
@contract(response=wire.PoolCostResponse)
def pool_cost(name: str) -> wire.PoolCostResponse:
    """What the pool's instances cost: the hourly rate now and this month's spend, per instance."""
    _check_pool(name)
    pool = state().config.pool(name)
    config = pool.provider_config if pool is not None else None
    if config is None or config.cost is None or not config.cost.prices:
        raise NotFound(f"resource pool '{name}' has no prices (provider.cost.prices)")
    policy = config.cost.policy()
    now = dt.datetime.now(dt.UTC)
    start = cost.month_start(now)
    with db() as conn:
        rows = cost.costs(provisioning.pool_usage(conn, name, start), policy, start, now)
    return {
        "currency": "USD",
        "periodStart": start.isoformat(),
        "hourlyRate": sum(c.hourly_price for c in rows if c.running),
        "spentThisMonth": sum(c.cost for c in rows),
        "maxHourlyCost": policy.max_hourly_cost,
        "monthlyBudget": policy.monthly_budget,
        "instances": [
            {
                "id": c.id,
                "instanceType": c.instance_type,
                "market": c.market.value,
                "hourlyPrice": c.hourly_price,
                "hoursThisMonth": c.hours,
                "costThisMonth": c.cost,
                "running": c.running,
            }
            for c in rows
        ],
    }
