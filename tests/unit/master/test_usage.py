"""The usage reports' arithmetic (det.master.usage): periods, clipping, shares of a machine."""

from __future__ import annotations

import datetime as dt

import pytest

from det.master import usage
from det.master.provisioner.provider import Market

T = dt.datetime(2025, 12, 31, 22, 0, tzinfo=dt.UTC)


def at(hours: float) -> dt.datetime:
    return T + dt.timedelta(hours=hours)


def machine(market: Market = Market.ON_DEMAND, price: float | None = 8.0) -> usage.Machine:
    return usage.Machine("m", "p", "x8", market, at(0), at(10), 8, price)


ENDED = T + dt.timedelta(hours=4)


def hold(placement: dict[str, int], end: dt.datetime | None = ENDED) -> usage.Hold:
    slots = sum(placement.values())
    return usage.Hold("a.1", "a", "TRIAL", "p", slots, at(1), end, placement, experiment_id=3)


def test_months_cross_the_year_and_days_are_utc_days() -> None:
    months = usage.months(dt.date(2025, 11, 20), dt.date(2026, 2, 1))
    assert [m[0] for m in months] == ["2025-11", "2025-12", "2026-01", "2026-02"]
    assert months[1][2] == months[2][1] == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    days = usage.days(dt.date(2024, 2, 28), dt.date(2024, 3, 1))
    assert [d[0] for d in days] == ["2024-02-28", "2024-02-29", "2024-03-01"]
    assert all(d[2] - d[1] == dt.timedelta(days=1) for d in days)


def test_a_hold_pays_its_share_of_the_machine_for_the_window() -> None:
    machines = {"m": machine()}
    u = usage.use(hold({"m": 2}), machines, at(0), at(24), at(24))
    assert u is not None
    assert u.seconds == 3 * 3600 and u.figures.slot_seconds == 2 * 3 * 3600
    assert u.figures.on_demand_usd == pytest.approx(8.0 * 2 / 8 * 3)
    assert u.figures.spot_usd == 0 and u.figures.priced
    # Clipped to a window that cuts it, and nothing outside it.
    part = usage.use(hold({"m": 2}), machines, at(2), at(2.5), at(24))
    assert part is not None and part.figures.usd == pytest.approx(2.0 * 0.5)
    assert usage.use(hold({"m": 2}), machines, at(5), at(6), at(24)) is None


def test_a_live_hold_runs_to_now_and_a_machine_stops_charging_when_it_ended() -> None:
    machines = {"m": machine(Market.SPOT)}
    u = usage.use(hold({"m": 8}, end=None), machines, at(0), at(48), at(12))
    assert u is not None
    assert u.seconds == 11 * 3600  # to now
    assert u.figures.spot_usd == pytest.approx(8.0 * 9)  # the machine ended at hour 10


def test_unpriced_machines_and_zero_slot_tasks_add_no_dollars() -> None:
    unpriced = usage.use(hold({"m": 1}), {"m": machine(price=None)}, at(0), at(9), at(9))
    assert unpriced is not None and not unpriced.figures.priced
    assert unpriced.figures.usd == 0 and unpriced.figures.slot_seconds == 3 * 3600
    static = usage.use(hold({"rack": 1}), {"m": machine()}, at(0), at(9), at(9))
    assert static is not None and not static.figures.priced
    gc = usage.use(hold({"m": 0}), {"m": machine()}, at(0), at(9), at(9))
    assert gc is not None and gc.figures.priced and gc.figures.usd == 0


def test_idle_is_what_the_machines_cost_that_no_task_held() -> None:
    machines = {"m": machine()}
    (p,) = usage.aggregate([hold({"m": 4})], machines, [("all", at(0), at(24))], at(24))
    assert p.machines_usd["p"] == pytest.approx(80.0)
    assert p.charged_usd["p"] == pytest.approx(12.0)
    assert p.idle_usd == {"p": pytest.approx(68.0)}
    assert p.by["experiment"]["3"].usd == pytest.approx(12.0)
