"""Cost control: instance accounting, and the caps the decider applies to launches."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from det.master.provisioner.config import ProviderConfigError, parse_provider_config
from det.master.provisioner.cost import CostPolicy, Usage, costs, month_start, next_month_start
from det.master.provisioner.decider import AgentInfo, PoolSnapshot, ScalePolicy, decide
from det.master.provisioner.provider import Instance, InstanceState, LaunchOption, Market

NOW = dt.datetime(2026, 3, 10, 12, 0, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)
T4 = LaunchOption("g4dn.xlarge", slots=1)
T4_SPOT = LaunchOption("g4dn.xlarge", market=Market.SPOT, slots=1)
PRICES = CostPolicy(prices={"g4dn.xlarge": 0.5, "g5.xlarge": 1.0}, spot_prices={"g4dn.xlarge": 0.2})


def policy(cost: CostPolicy | None, *options: LaunchOption) -> ScalePolicy:
    return ScalePolicy(options=options or (T4,), max_instances=10, cost=cost)


def running(n: int, instance_type: str = "g4dn.xlarge") -> tuple[Instance, ...]:
    return tuple(
        Instance(f"i-{instance_type}-{k}", InstanceState.RUNNING, NOW - HOUR, instance_type)
        for k in range(n)
    )


def busy(instances: tuple[Instance, ...]) -> tuple[AgentInfo, ...]:
    return tuple(AgentInfo(i.id, 1, True, NOW) for i in instances)


def launched(decision) -> int:  # type: ignore[no-untyped-def]
    return sum(o.count for o in decision.launches)


# --- accounting ----------------------------------------------------------------------------


def test_instances_cost_their_hours_in_the_period_at_their_market_price() -> None:
    start = month_start(NOW)
    usages = [
        Usage("a", "g4dn.xlarge", Market.ON_DEMAND, NOW - 3 * HOUR, NOW - HOUR),  # 2 h ended
        Usage("b", "g4dn.xlarge", Market.SPOT, NOW - 2 * HOUR),  # 2 h, running, spot
        Usage("c", "g5.xlarge", Market.ON_DEMAND, start - 5 * HOUR, start + HOUR),  # 1 h inside
    ]
    out = {c.id: c for c in costs(usages, PRICES, start, NOW)}
    assert out["a"].cost == pytest.approx(1.0) and not out["a"].running
    assert out["b"].cost == pytest.approx(0.4) and out["b"].running
    assert out["b"].hourly_price == 0.2
    assert out["c"].hours == pytest.approx(1.0) and out["c"].cost == pytest.approx(1.0)


def test_an_instance_ended_before_the_period_costs_nothing_in_it() -> None:
    start = month_start(NOW)
    usages = [Usage("old", "g4dn.xlarge", Market.ON_DEMAND, start - 9 * HOUR, start - HOUR)]
    assert costs(usages, PRICES, start, NOW) == []


def test_an_unknown_type_counts_at_the_highest_price() -> None:
    assert PRICES.price("x9.huge", Market.ON_DEMAND) == 1.0
    # a spot instance without a spot price pays the on-demand price
    assert PRICES.price("g5.xlarge", Market.SPOT) == 1.0


def test_months_are_utc_calendar_months() -> None:
    assert month_start(NOW) == dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    assert next_month_start(dt.datetime(2026, 12, 31, 23, tzinfo=dt.UTC)) == dt.datetime(
        2027, 1, 1, tzinfo=dt.UTC
    )


# --- the decider ---------------------------------------------------------------------------


def test_without_cost_config_launches_are_unchanged() -> None:
    d = decide(PoolSnapshot("gpu", demand=(1,) * 6), policy(None), NOW)
    assert launched(d) == 6


def test_the_hourly_cap_limits_launches_and_says_why() -> None:
    cap = dataclasses.replace(PRICES, max_hourly_cost=2.0)
    inst = running(2)  # 2 x 0.5 = 1.0 $/h already
    d = decide(
        PoolSnapshot("gpu", demand=(1,) * 6, instances=inst, agents=busy(inst)), policy(cap), NOW
    )
    assert launched(d) == 2  # (2.0 - 1.0) / 0.5
    (event,) = [e for e in d.events if e.code == "cost-cap"]
    assert "max_hourly_cost=$2.00/h allows 2" in event.message and "6 more" in event.message


def test_the_cap_uses_the_price_of_the_option_being_launched() -> None:
    cap = dataclasses.replace(PRICES, max_hourly_cost=1.0)
    d = decide(PoolSnapshot("gpu", demand=(1,) * 9), policy(cap, T4_SPOT), NOW)
    assert launched(d) == 5  # 1.0 / 0.2 spot


def test_at_the_cap_nothing_launches() -> None:
    cap = dataclasses.replace(PRICES, max_hourly_cost=1.0)
    inst = running(1, "g5.xlarge")
    d = decide(
        PoolSnapshot("gpu", demand=(1,), instances=inst, agents=busy(inst)), policy(cap), NOW
    )
    assert launched(d) == 0 and [e.code for e in d.events] == ["cost-cap"]


def test_instances_being_terminated_do_not_count_against_the_cap() -> None:
    cap = dataclasses.replace(PRICES, max_hourly_cost=1.0)
    stopped = (Instance("i-gone", InstanceState.STOPPED, NOW - HOUR, "g5.xlarge"),)
    d = decide(PoolSnapshot("gpu", demand=(1, 1), instances=stopped), policy(cap), NOW)
    assert [t.instance_id for t in d.terminations] == ["i-gone"]
    assert launched(d) == 2


def test_a_spent_budget_stops_launches_even_for_min_instances() -> None:
    budget = dataclasses.replace(PRICES, monthly_budget=100.0)
    pol = dataclasses.replace(policy(budget), min_instances=1)
    d = decide(PoolSnapshot("gpu", demand=(1,), spent=100.0), pol, NOW)
    assert launched(d) == 0
    (event,) = [e for e in d.events if e.code == "budget-spent"]
    assert "$100.00 of its monthly_budget $100.00" in event.message
    assert "2026-04-01" in event.message
    assert launched(decide(PoolSnapshot("gpu", demand=(1,), spent=99.0), pol, NOW)) == 1


# --- config --------------------------------------------------------------------------------

BASE = {
    "type": "aws",
    "image_id": "ami-12c6146b",
    "instance_type": "g4dn.xlarge",
    "instance_slots": 1,
    "fallback": [{"instance_type": "g5.xlarge"}],
}


def test_config_builds_the_cost_policy() -> None:
    cfg = parse_provider_config(
        {**BASE, "cost": {"prices": {"g4dn.xlarge": 0.5, "g5.xlarge": 1}, "max_hourly_cost": 3}}
    )
    cost = cfg.scale_policy().cost
    assert cost is not None and cost.max_hourly_cost == 3 and cost.prices["g5.xlarge"] == 1


@pytest.mark.parametrize(
    ("cost", "needle"),
    [
        ({"prices": {"g4dn.xlarge": 0.5}, "max_hourly_cost": 3}, "no price for g5.xlarge"),
        ({"prices": {"g4dn.xlarge": 0.5}, "monthly_budget": 10}, "no price for g5.xlarge"),
        ({"prices": {"g4dn.xlarge": -1}}, "provider.cost.prices.g4dn.xlarge"),
        ({"max_hourly_cost": 0}, "provider.cost.max_hourly_cost"),
        ({"budget": 5}, "provider.cost.budget"),
    ],
)
def test_bad_cost_config_names_the_field(cost: dict[str, object], needle: str) -> None:
    with pytest.raises(ProviderConfigError) as err:
        parse_provider_config({**BASE, "cost": cost})
    assert needle in str(err.value)
