"""bench/cost_sim.py runs det's searcher, scheduler and scale decider on a simulated cloud:
every trial of the search is trained and ended, the bill covers every machine until it ended,
and the notice spares the work an interruption would otherwise lose."""

import datetime as dt
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

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


@pytest.fixture(autouse=True)
def _smaller_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """30 trials instead of the bench's 100: the same code paths, a third of the time."""
    monkeypatch.setitem(sim.SEARCHER, "max_trials", 30)


def _cloud(rate: float) -> object:
    return sim.Cloud(
        boot=dt.timedelta(minutes=3),
        startup=dt.timedelta(minutes=1),
        checkpoint=dt.timedelta(seconds=30),
        notice=dt.timedelta(minutes=2),
        interrupt_rate=rate,
        spot_refusals=0.1,
        validate_every=4.0,
        max_instances=16,
        prices=sim.CostPolicy(prices={sim.ITYPE: 1.0}, spot_prices={sim.ITYPE: 0.3}),
    )


def test_without_interruptions_det_pays_spot_prices_for_fewer_machine_hours() -> None:
    determined, det, _ = sim.policies(120.0)
    a = sim.run(determined, _cloud(0.0), seed=0)
    b = sim.run(det, _cloud(0.0), seed=0)
    assert a.spot_launches == 0 and a.interruptions == 0
    # The bill is every machine's hours at its price: on-demand only for Determined's policy.
    assert abs(a.usd - a.instance_hours * 1.0) < 1e-6
    # 20 idle minutes at the end of each of Determined's machines, 2 of det's.
    assert b.instance_hours < a.instance_hours
    assert b.usd < 0.35 * a.usd
    assert b.wall <= a.wall * 1.1


def test_the_notice_spares_the_work_an_interruption_loses() -> None:
    _, det, no_notice = sim.policies(120.0)
    with_notice = sim.run(det, _cloud(0.5), seed=1)
    without = sim.run(no_notice, _cloud(0.5), seed=1)
    assert with_notice.interruptions > 0 and without.interruptions > 0
    assert with_notice.redone_units == 0
    assert without.redone_units > 0
