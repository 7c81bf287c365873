"""Hyperparameter parsing, sampling and grids; minimal searcher-config validation."""

import random
from typing import Any

import pytest

from det.master.expconf.base import default_of
from det.master.expconf.hyperparameters import ConstHP
from det.master.expconf.searcher import AdaptiveAshaSearcher, AsyncHalvingSearcher, RandomSearcher
from det.master.searcher import (
    grid_points,
    new_searcher,
    parse_hyperparameters,
    parse_searcher_config,
)
from det.master.searcher.hparams import grid_size, grid_values, sample_all

ASHA = {"name": "async_halving", "metric": "loss", "max_trials": 8, "num_rungs": 3}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"lr": {"type": "int", "minval": "1", "maxval": 3}}, "hyperparameters.lr.minval"),
        ({"lr": {"type": "double", "maxval": 3}}, "hyperparameters.lr.minval: required"),
        (
            {"lr": {"type": "double", "minval": 3, "maxval": 1}},
            "hyperparameters.lr: minval must be less than maxval",
        ),
        ({"lr": {"type": "log", "minval": -3, "maxval": -1, "base": 1}}, "hyperparameters.lr.base"),
        ({"c": {"type": "categorical", "vals": []}}, "hyperparameters.c.vals"),
        ({"c": {"type": "const"}}, "hyperparameters.c.val: required"),
        ({"opt": {"lr": {"type": "float", "minval": 0}}}, "hyperparameters.opt.lr.type"),
        ({"n": {"type": "int", "minval": 1, "maxval": 3, "count": 0}}, "hyperparameters.n.count"),
    ],
)
def test_bad_hyperparameter_names_field(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_hyperparameters(raw)


def test_bare_values_are_constants_and_dicts_without_type_are_nested() -> None:
    space = parse_hyperparameters({"layers": [64, 32], "opt": {"name": "sgd", "momentum": 0.9}})
    assert space["layers"] == ConstHP(val=[64, 32])
    assert isinstance(space["opt"], dict)
    sample = sample_all(space, random.Random(0))
    assert sample == {"layers": [64, 32], "opt": {"momentum": 0.9, "name": "sgd"}}


def test_samples_stay_in_range_and_int_reaches_both_ends() -> None:
    space = parse_hyperparameters(
        {
            "n": {"type": "int", "minval": 1, "maxval": 3},
            "x": {"type": "double", "minval": -1.0, "maxval": 1.0},
            "lr": {"type": "log", "minval": -4, "maxval": -2, "base": 10},
            "act": {"type": "categorical", "vals": ["relu", "tanh"]},
            "opt": {"m": {"type": "double", "minval": 0.5, "maxval": 0.6}},
        }
    )
    rng = random.Random(1)
    samples = [sample_all(space, rng) for _ in range(300)]
    assert {s["n"] for s in samples} == {1, 2, 3}
    assert all(-1.0 <= s["x"] <= 1.0 for s in samples)
    assert all(1e-4 <= s["lr"] <= 1e-2 for s in samples)
    assert {s["act"] for s in samples} == {"relu", "tanh"}
    assert all(0.5 <= s["opt"]["m"] <= 0.6 for s in samples)


def test_sampling_ignores_dict_order() -> None:
    a = {
        "x": {"type": "double", "minval": 0, "maxval": 1},
        "y": {"type": "int", "minval": 0, "maxval": 9},
    }
    b = dict(reversed(list(a.items())))
    assert sample_all(parse_hyperparameters(a), random.Random(5)) == sample_all(
        parse_hyperparameters(b), random.Random(5)
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"type": "int", "minval": 1, "maxval": 10, "count": 3}, [1, 6, 10]),
        ({"type": "int", "minval": 0, "maxval": 9, "count": 3}, [0, 5, 9]),  # 4.5 rounds up
        ({"type": "int", "minval": 1, "maxval": 3, "count": 10}, [1, 2, 3]),  # clamped
        ({"type": "int", "minval": 1, "maxval": 4, "count": 1}, [3]),
        ({"type": "double", "minval": 0.0, "maxval": 1.0, "count": 3}, [0.0, 0.5, 1.0]),
        ({"type": "double", "minval": 0.0, "maxval": 1.0, "count": 1}, [0.5]),
        ({"type": "log", "minval": -3, "maxval": -1, "base": 10, "count": 3}, [1e-3, 1e-2, 1e-1]),
        ({"type": "categorical", "vals": ["a", "b"]}, ["a", "b"]),
        ({"type": "const", "val": 7}, [7]),
    ],
)
def test_grid_axis_values(raw: dict[str, Any], expected: list[Any]) -> None:
    hp = parse_hyperparameters({"h": raw})["h"]
    assert not isinstance(hp, dict)
    assert grid_values(hp, "hyperparameters.h") == pytest.approx(expected)


def test_grid_is_the_cartesian_product_including_nested_leaves() -> None:
    space = parse_hyperparameters(
        {
            "a": {"type": "int", "minval": 1, "maxval": 10, "count": 3},
            "b": {"type": "categorical", "vals": ["x", "y"]},
            "c": 5,
            "opt": {"m": {"type": "double", "minval": 0, "maxval": 1, "count": 2}, "k": "v"},
        }
    )
    points = grid_points(space)
    assert grid_size(space) == len(points) == 12
    assert points[0] == {"a": 1, "b": "x", "c": 5, "opt": {"k": "v", "m": 0.0}}
    assert points[-1] == {"a": 10, "b": "y", "c": 5, "opt": {"k": "v", "m": 1.0}}
    assert len({repr(sorted(p.items())) for p in points}) == 12


def test_grid_requires_counts_and_names_the_field() -> None:
    space = parse_hyperparameters({"opt": {"lr": {"type": "double", "minval": 0, "maxval": 1}}})
    with pytest.raises(ValueError, match=r"hyperparameters\.opt\.lr\.count: required"):
        grid_points(space)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"name": "bayes", "metric": "loss"}, "searcher.name"),
        ({"name": "random", "max_trials": 3}, "searcher.metric"),
        ({"name": "random", "metric": "loss"}, "searcher.max_trials: required"),
        ({"name": "random", "metric": "loss", "max_trials": 0}, "searcher.max_trials"),
        (
            {"name": "random", "metric": "loss", "max_trials": 2, "max_concurrent_trials": -1},
            "searcher.max_concurrent_trials",
        ),
        (
            {"name": "single", "metric": "loss", "smaller_is_better": "yes"},
            "searcher.smaller_is_better",
        ),
        ({**ASHA, "time_metric": "batches"}, "searcher.max_time"),
        ({**ASHA, "max_time": 10}, "searcher.time_metric"),
        ({**ASHA, "max_time": 10, "time_metric": "batches", "divisor": 1}, "searcher.divisor"),
        ({**ASHA, "max_time": -1, "time_metric": "batches"}, "searcher.max_time"),
        (
            {**ASHA, "max_time": 9, "time_metric": "batches", "num_rungs": None},
            "searcher.num_rungs",
        ),
        (
            {**ASHA, "name": "adaptive_asha", "max_time": 9, "time_metric": "b", "mode": "wild"},
            "searcher.mode",
        ),
        (
            {
                **ASHA,
                "name": "adaptive_asha",
                "max_time": 9,
                "time_metric": "b",
                "bracket_rungs": [0],
            },
            "searcher.bracket_rungs",
        ),
    ],
)
def test_bad_searcher_config_names_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        parse_searcher_config(raw)


def test_searcher_config_defaults_and_legacy_max_length() -> None:
    cfg = parse_searcher_config(
        {"name": "adaptive_asha", "metric": "acc", "smaller_is_better": False, "max_trials": 9,
         "max_length": {"batches": 900}}
    )  # fmt: skip
    assert isinstance(cfg, AdaptiveAshaSearcher)
    assert (cfg.time_budget(), cfg.divisor, cfg.mode, cfg.max_rungs) == (
        ("batches", 900.0), 4.0, "standard", 5
    )  # fmt: skip
    assert cfg.max_concurrent_trials == 16
    # A dumped config model spells unset fields as null.
    dumped = {**ASHA, "max_time": 9, "time_metric": "b", "max_length": None, "divisor": None}
    assert (
        parse_searcher_config(dumped).max_concurrent_trials,
        parse_searcher_config(dumped).divisor,
    ) == (16, 4.0)
    single = parse_searcher_config({"name": "single", "metric": "loss", "max_length": 100})
    assert (single.time_budget(), single.max_length_units()) == (None, 100.0)


def test_one_searcher_config_model_for_expconf_and_the_pure_searcher() -> None:
    """The pure searcher reads the experiment config's own model, so a default changed there
    is the searcher's default too."""
    cfg = parse_searcher_config({"name": "random", "metric": "loss", "max_trials": 2})
    assert isinstance(cfg, RandomSearcher)
    assert cfg.smaller_is_better is default_of(RandomSearcher, "smaller_is_better")
    assert cfg.sampler_name() == "random"
    searcher = new_searcher(
        {"name": "async_halving", "metric": "loss", "max_trials": 4, "num_rungs": 2,
         "time_metric": "batches", "max_time": 8}, {}, 0
    )  # fmt: skip
    assert isinstance(searcher.config, AsyncHalvingSearcher)
    assert (searcher.time_metric, searcher.max_time) == ("batches", 8.0)
