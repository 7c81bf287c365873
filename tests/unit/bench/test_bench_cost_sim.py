"""bench/cost_sim.py: the spot market behaves as its docstring says (an outage lasts as
configured and covers one zone, a wave hits one zone, refusal episodes have the configured share
and length, the timeline is seeded), Determined's provisioner is modelled as its source reads,
and the simulation runs det's searcher, scheduler and scale decider to the search's end."""

import dataclasses
import datetime as dt
import importlib.util
import statistics
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest


def _load() -> ModuleType:
    path = Path(__file__).resolve().parents[3] / "bench" / "cost_sim.py"
    spec = importlib.util.spec_from_file_location("bench_cost_sim", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module by name
    spec.loader.exec_module(module)
    return module


sim = _load()
A, B, C = sim.ZONES
HOUR = 3600.0


@pytest.fixture
def small_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """30 trials instead of the bench's 100: the same code paths, a third of the time."""
    monkeypatch.setitem(sim.SEARCHER, "max_trials", 30)


# -- the market -----------------------------------------------------------------------------


def test_an_outage_refuses_every_spot_type_in_its_zone_for_as_long_as_configured() -> None:
    market = sim.SpotMarket(
        sim.Disturbance(outage_zone=A, outage_start=1.0, outage_hours=3.0), seed=0
    )
    for itype in sim.KINDS:
        assert market.refused_spans(A, itype) == [(1 * HOUR, 4 * HOUR)]
        assert not market.refused(A, itype, 1 * HOUR - 1)
        assert market.refused(A, itype, 1 * HOUR)
        assert market.refused(A, itype, 4 * HOUR - 1)
        assert not market.refused(A, itype, 4 * HOUR)
        for zone in (B, C):  # the other zones are untouched
            assert market.refused_spans(zone, itype) == []


def test_each_wave_hits_one_zone_and_refuses_spot_there_for_the_configured_time() -> None:
    d = sim.Disturbance(waves_per_hour=2.0, wave_refusal_minutes=30.0)
    market = sim.SpotMarket(d, seed=3, horizon_hours=200.0)
    waves = market.waves
    assert 320 <= len(waves) <= 480  # 400 expected over 200 h (Poisson, 4 sd)
    assert {w.zone for w in waves} == set(sim.ZONES)
    for w in waves[:50]:
        for zone in sim.ZONES:
            covered = any(
                v.zone == zone and v.at <= w.at + 1 < v.at + 1800 for v in waves
            )  # another wave may cover the same instant in another zone
            assert market.refused(zone, sim.G5, w.at + 1) == covered
            if zone == w.zone:
                assert covered
    # A wave reclaims each machine in its zone with probability wave_share, seeded.
    draws = [market.reclaims(waves[0], f"i-{n:05d}") for n in range(2000)]
    assert 0.44 < sum(draws) / len(draws) < 0.56
    assert draws == [market.reclaims(waves[0], f"i-{n:05d}") for n in range(2000)]


def test_refusal_episodes_have_the_configured_share_and_length_per_pool() -> None:
    d = sim.Disturbance(refused_share=0.5, refusal_hours=2.0)
    horizon = 2000.0
    market = sim.SpotMarket(d, seed=1, horizon_hours=horizon)
    for zone in sim.ZONES:
        for itype in sim.KINDS:
            spans = market.refused_spans(zone, itype)
            lengths = [(end - start) / HOUR for start, end in spans]
            share = sum(min(e, horizon * HOUR) - s for s, e in spans) / (horizon * HOUR)
            assert 0.42 < share < 0.58, (zone, itype, share)
            assert 1.6 < statistics.mean(lengths) < 2.4, (zone, itype)
    # Pools are independent: one pool's episodes are not another's.
    assert market.refused_spans(A, sim.G5) != market.refused_spans(B, sim.G5)
    assert market.refused_spans(A, sim.G5) != market.refused_spans(A, sim.G6)


def test_the_market_is_seeded() -> None:
    d = sim.Disturbance(refused_share=0.3, waves_per_hour=1.0)
    one, again, other = (sim.SpotMarket(d, seed=s) for s in (5, 5, 6))
    assert one.waves == again.waves != other.waves
    assert one.refused_spans(B, sim.G6) == again.refused_spans(B, sim.G6)
    assert one.refused_spans(B, sim.G6) != other.refused_spans(B, sim.G6)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"refused_share": 1.0}, "refused_share"),
        ({"wave_share": -0.1}, "wave_share"),
        ({"outage_zone": "mars-1a"}, "outage_zone"),
        ({"outage_hours": -1.0}, "outage_hours"),
    ],
)
def test_a_bad_disturbance_names_its_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}: "):
        sim.Disturbance(**kwargs)


def test_prices_differ_by_zone_and_type() -> None:
    spot = {sim.price(sim._spot(t, z)) for t in sim.KINDS for z in sim.ZONES}
    assert len(spot) == len(sim.KINDS) * len(sim.ZONES)


# -- Determined's provisioner ---------------------------------------------------------------


def test_an_open_spot_request_holds_back_a_launch_and_never_times_out() -> None:
    now = sim.T0 + dt.timedelta(hours=10)
    option = sim._spot(sim.G5, A)
    open_request = sim.Machine("i-00000", option, sim.T0)  # requested 10 h ago, never filled
    idle = sim.Machine("i-00001", option, sim.T0, sim.T0, sim.T0 + dt.timedelta(minutes=3))
    idle.idle_since = now - dt.timedelta(minutes=5)
    count, ends = sim.determined_decide(
        [open_request, idle], set(), 3, now, dt.timedelta(minutes=2), 16
    )
    assert count == 2  # 3 wanted, 1 already "starting"
    assert ends == ["i-00001"]  # the idle machine goes, the open request stays


# -- whole searches -------------------------------------------------------------------------


def _runs(level: Any, seed: int = 0) -> dict[str, Any]:
    cloud = sim.default_cloud()
    market = sim.SpotMarket(level, seed)
    return {s.name: sim.run(s, cloud, market, seed) for s in sim.systems()}


@pytest.mark.usefixtures("small_search")
def test_undisturbed_spot_costs_a_third_of_on_demand_in_the_same_time() -> None:
    runs = _runs(sim.LEVELS["none"])
    spot, od, det = (runs[n] for n in ("Determined at its best", "Determined on-demand", "det"))
    assert od.spot_launches == 0 and od.interruptions == 0
    # The bill is every machine's hours at its price: on-demand only for that row.
    assert abs(od.usd - od.instance_hours * sim.KINDS[sim.G5].on_demand) < 1e-6
    assert det.usd < 0.35 * od.usd and spot.usd < 0.35 * od.usd
    assert det.wall <= od.wall * 1.1


@pytest.mark.usefixtures("small_search")
def test_under_a_zone_outage_determined_waits_and_det_meets_the_goal() -> None:
    outage = sim.Disturbance(outage_zone=A, outage_hours=4.0)
    runs = _runs(outage)
    spot, od, det = (runs[n] for n in ("Determined at its best", "Determined on-demand", "det"))
    assert spot.wall > dt.timedelta(hours=4)  # its open requests wait out the outage
    assert det.wall <= od.wall * 1.10
    assert det.usd <= od.usd * 0.5
    assert det.on_demand_launches == 0  # the other zones' spot sufficed


@pytest.mark.usefixtures("small_search")
def test_a_wave_reclaims_only_its_zone_and_the_notice_spares_the_lost_work() -> None:
    cloud = sim.default_cloud()
    determined_spot, _, det = sim.systems()
    everyone = sim.Disturbance(wave_share=1.0)

    def market(zone: str) -> Any:
        m = sim.SpotMarket(everyone, seed=1)
        m.waves = (sim.Wave(20 * 60.0, zone, 0),)  # one wave, 20 minutes in
        return m

    elsewhere = sim.run(determined_spot, cloud, market(B), 1)
    assert elsewhere.interruptions == 0  # its machines all run in us-east-1a
    hit = sim.run(determined_spot, cloud, market(A), 1)
    assert hit.interruptions == 16  # every machine there, at once
    assert hit.redone_units > 0  # no notice handling: back to the last checkpoint
    with_notice = sim.run(det, cloud, market(A), 1)
    without = sim.run(dataclasses.replace(det, notice=False), cloud, market(A), 1)
    assert with_notice.interruptions == without.interruptions == 16
    assert with_notice.redone_units == 0
    assert without.redone_units > 0
