"""bench/scale.py's pure parts: the points, each trial's schedule of reports, the rates they
ask of the master, the percentiles and the knee (no timing is asserted)."""

import importlib.util
import json
import math
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

from det.agent.daemon import WORK_WAIT_SECONDS
from det.master.services.agents import keepalive_seconds


def _load_scale() -> ModuleType:
    path = Path(__file__).resolve().parents[3] / "bench" / "scale.py"
    spec = importlib.util.spec_from_file_location("bench_scale", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module by name
    spec.loader.exec_module(module)
    return module


scale = _load_scale()
Point = scale.Point


def test_a_point_is_agents_by_trials_with_enough_slots_for_every_trial() -> None:
    p = Point.parse("100x250")
    assert (p.agents, p.trials, p.slots_per_agent, str(p)) == (100, 250, 3, "100x250")
    assert Point.parse(" 7X0 ").slots_per_agent == 1


@pytest.mark.parametrize("bad", ["100", "x200", "0x10", "10x", "ax3", "10x-1", ""])
def test_a_malformed_point_is_refused_naming_it(bad: str) -> None:
    with pytest.raises(ValueError, match="AGENTSxTRIALS") as e:
        Point.parse(bad)
    assert repr(bad) in str(e.value)


def test_a_trials_schedule_has_each_kind_at_its_period_from_its_phase() -> None:
    periods = {"training": 10.0, "validation": 60.0, "checkpoint": 600.0}
    events = scale.schedule(
        {"training": 3.0, "validation": 70.0, "checkpoint": 0.0}, periods, 120.0
    )
    kinds = [k for _, k in events]
    assert kinds.count("training") == 12
    assert kinds.count("validation") == 2  # phase 70 folds into the period: at 10 and 70
    assert kinds.count("checkpoint") == 1
    assert [t for t, k in events if k == "validation"] == [10.0, 70.0]
    assert [t for t, _ in events] == sorted(t for t, _ in events)
    # Due together: in the order the periods are given.
    at_zero = scale.schedule({"training": 0.0, "validation": 0.0, "checkpoint": 0.0}, periods, 1.0)
    assert [k for _, k in at_zero] == ["training", "validation", "checkpoint"]


def test_over_an_hour_a_trial_asks_the_production_rates() -> None:
    events = scale.schedule(scale.random_phases(random.Random(3)), scale.PERIODS, 3600.0)
    kinds = [k for _, k in events]
    assert (kinds.count("training"), kinds.count("validation"), kinds.count("checkpoint")) == (
        360,
        60,
        6,
    )


def test_phases_are_spread_over_each_period() -> None:
    rng = random.Random(1)
    phases = [scale.random_phases(rng) for _ in range(200)]
    for kind, period in scale.PERIODS.items():
        values = [p[kind] for p in phases]
        assert all(0 <= v < period for v in values)
        assert min(values) < period / 4 and max(values) > 3 * period / 4


def test_the_rates_of_a_point() -> None:
    rates = scale.rate_per_second(Point(1000, 2000))
    assert rates["training"] == pytest.approx(200.0)
    assert rates["validation"] == pytest.approx(2000 / 60)
    assert rates["checkpoint"] == pytest.approx(2000 / 600)
    # Quiet heartbeats: one a keepalive (the master's at the bench's agent timeout), a pass
    # early.
    assert keepalive_seconds(30.0) == scale.KEEPALIVE_SECONDS
    assert scale.WORK_WAIT_SECONDS == WORK_WAIT_SECONDS  # the agents wait for work as det-agent
    assert rates["heartbeat"] == pytest.approx(1000 / 7) and rates["logs"] == 1000.0
    assert scale.rate_per_second(Point(5, 0))["logs"] == 0.0


def test_percentiles_are_nearest_rank() -> None:
    values = list(range(1, 101))
    random.Random(0).shuffle(values)
    assert scale.percentile(values, 50) == 50
    assert scale.percentile(values, 99) == 99
    assert scale.percentile(values, 100) == 100
    assert scale.percentile([7.0], 99) == 7.0
    assert math.isnan(scale.percentile([], 50))
    with pytest.raises(ValueError, match="q: must be in"):
        scale.percentile(values, 0)


def test_the_knee_is_the_first_point_in_load_order_over_the_limit() -> None:
    rows = [
        (Point(400, 800), 300.0, 90.0),
        (Point(100, 200), 20.0, 30.0),
        (Point(200, 400), 40.0, 251.0),
    ]
    assert scale.knee(rows) == Point(200, 400)  # its heartbeats, though listed last
    assert scale.knee([(Point(1, 2), 250.0, 250.0)]) is None  # at the limit is not over it
    assert scale.knee([(Point(1, 2), float("nan"), 1.0)]) == Point(1, 2)  # nothing answered
    assert scale.knee([]) is None
    # No trials, no reports: only its heartbeats count.
    assert scale.knee([(Point(100, 0), float("nan"), 60.0), (Point(100, 200), 20.0, 300.0)]) == (
        Point(100, 200)
    )


def test_growth_is_scaled_to_an_hour() -> None:
    assert scale.per_hour(1_000, 61_000, 60.0) == 3_600_000.0
    with pytest.raises(ValueError, match="seconds"):
        scale.per_hour(0, 1, 0)


def test_waits_are_read_from_every_front_and_kept_to_the_window(tmp_path: Path) -> None:
    # Two fronts' --waits lines (bench/_routes/sitecustomize.py): app calls and pool waits, each
    # with the time it ended; the window keeps those that ended in it.
    (tmp_path / "101.waits").write_text(
        '{"calls": [[9.0, "POST /hb", 0.5, 0.1], [10.0, "POST /hb", 0.02, 0.001]],'
        ' "pool": [[9.5, 0.3], [10.5, 0.004]]}\n'
        '{"calls": [[12.0, "GET /x", 0.01, 0.01]], "pool": [[21.0, 9.0]]}\n'
    )
    # The other front also timed each request around the app ([end, route, read to queued,
    # queued, service]) and its event loop's turns ([end, wall, CPU, events]).
    (tmp_path / "102.waits").write_text(
        '{"calls": [[15.0, "POST /hb", 0.03, 0.002]], "pool": [[20.0, 0.006]],'
        ' "served": [[9.9, "POST /hb", 0.1, 0.2, 0.3], [11.0, "POST /hb", 0.001, 0.05, 0.02]],'
        ' "turns": [[10.5, 0.004, 0.003, 7], [20.5, 1.0, 1.0, 1]]}\n'
    )
    (tmp_path / "101.json").write_text('{"": [1.0, 0]}')  # the routes' file: not read here
    waits = scale.read_waits(tmp_path, 10.0, 20.0)
    assert waits["calls"] == {
        "POST /hb": [(0.02, 0.001), (0.03, 0.002)],
        "GET /x": [(0.01, 0.01)],
    }
    assert sorted(waits["pool"]) == [0.004, 0.006]
    assert waits["served"] == {"POST /hb": [(0.001, 0.05, 0.02)]}
    assert waits["turns"] == [(0.004, 0.003, 7)]
    assert scale.read_waits(None, 0.0, 1e12) == {"calls": {}, "pool": [], "served": {}, "turns": []}


def test_pauses_are_read_from_every_front_and_kept_to_the_window(tmp_path: Path) -> None:
    # Two fronts' collections over 10 ms (bench/_routes/sitecustomize.py): [end, generation,
    # wall seconds] a line; the window keeps those that ended in it.
    (tmp_path / "101.pauses").write_text("[9.0, 2, 0.2]\n[10.0, 0, 0.012]\n[21.0, 1, 0.05]\n")
    (tmp_path / "102.pauses").write_text("[15.5, 2, 0.25]\n")
    (tmp_path / "101.waits").write_text('{"calls": [], "pool": []}\n')  # not read here
    assert sorted(scale.read_pauses(tmp_path, 10.0, 20.0)) == [(0, 0.012), (2, 0.25)]
    assert scale.read_pauses(None, 0.0, 1e12) == []


def test_heap_censuses_are_read_one_a_front(tmp_path: Path) -> None:
    census = {"at": 1.0, "generations": [1, 2, 3], "frozen": 4, "threads": 5, "old": [["dict", 3]]}
    (tmp_path / "101.heap").write_text(json.dumps(census))
    (tmp_path / "102.heap").write_text(json.dumps({**census, "threads": 6}))
    (tmp_path / "101.waits").write_text('{"calls": [], "pool": []}\n')  # not read here
    assert [h["threads"] for h in scale.read_heaps(tmp_path)] == [5, 6]
    assert scale.read_heaps(None) == []
