"""Cost control for autoscaled pools: what instances cost, and the caps launches obey. Pure.

Determined scales a pool up to ``max_instances`` whatever that costs. A pool's provider block
here may also carry::

    cost:
      prices: {g4dn.xlarge: 0.526}       # USD per instance-hour, on-demand
      spot_prices: {g4dn.xlarge: 0.20}   # optional; a spot instance without one uses prices
      max_hourly_cost: 2.0               # launch nothing that would take the pool above this
      monthly_budget: 300                # launch nothing once this calendar month's spend reaches it

Spend is accounted from the instances the master has seen, from launch until the master saw
them end (UTC calendar months). The caps only hold back launches: running work is never
stopped for cost (that would lose progress); ``max_instances`` and the idle period still apply.
A running instance whose type has no price counts at the highest configured price, so an
unknown machine can only make the cap stricter.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping

from det.master.provisioner.provider import Market


@dataclasses.dataclass(frozen=True)
class CostPolicy:
    prices: Mapping[str, float]
    spot_prices: Mapping[str, float] = dataclasses.field(default_factory=dict)
    max_hourly_cost: float | None = None
    monthly_budget: float | None = None

    def price(self, instance_type: str, market: Market) -> float:
        """USD per hour of one instance (the highest known price for an unknown type)."""
        if market is Market.SPOT and instance_type in self.spot_prices:
            return self.spot_prices[instance_type]
        if instance_type in self.prices:
            return self.prices[instance_type]
        return max([*self.prices.values(), *self.spot_prices.values(), 0.0])


@dataclasses.dataclass(frozen=True)
class Usage:
    """One instance's life as the master recorded it (``ended_at`` None while it runs)."""

    id: str
    instance_type: str
    market: Market
    launched_at: dt.datetime
    ended_at: dt.datetime | None = None


@dataclasses.dataclass(frozen=True)
class UsageCost:
    id: str
    instance_type: str
    market: Market
    hourly_price: float
    hours: float
    cost: float
    running: bool


def usd(amount: float) -> str:
    """``$1.25``; amounts under a cent keep their significant digits (``$0.0004``)."""
    return f"${amount:.2f}" if amount == 0 or abs(amount) >= 0.01 else f"${amount:.2g}"


def month_start(now: dt.datetime) -> dt.datetime:
    """The first instant of ``now``'s calendar month, in UTC."""
    now = now.astimezone(dt.UTC)
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def next_month_start(now: dt.datetime) -> dt.datetime:
    start = month_start(now)
    return (start + dt.timedelta(days=32)).replace(day=1)


def costs(
    usages: Iterable[Usage], policy: CostPolicy, since: dt.datetime, now: dt.datetime
) -> list[UsageCost]:
    """What each instance cost between ``since`` and ``now`` (instances outside: omitted)."""
    out = []
    for u in usages:
        end = min(u.ended_at or now, now)
        start = max(u.launched_at, since)
        if end <= start and u.ended_at is not None:
            continue
        hours = max((end - start).total_seconds(), 0.0) / 3600
        price = policy.price(u.instance_type, u.market)
        out.append(
            UsageCost(
                u.id, u.instance_type, u.market, price, hours, hours * price, u.ended_at is None
            )
        )
    return out


def hourly_rate(running: Iterable[tuple[str, Market]], policy: CostPolicy) -> float:
    """USD per hour of the given (instance type, market) instances together."""
    return sum(policy.price(t, m) for t, m in running)
