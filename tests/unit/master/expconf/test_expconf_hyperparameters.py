"""One hyperparameter model for the experiment config and the searcher: what the master refuses at
creation the searcher refuses with the same message, what it accepts the searcher searches, and
the searcher's space is made of the config's own model classes."""

from __future__ import annotations

import random
from typing import Any

import pytest

from det.master.expconf import ConfigError, parse_experiment_config
from det.master.expconf import hyperparameters as hp
from det.master.searcher import new_searcher, parse_hyperparameters, sample_all

BASE: dict[str, Any] = {
    "name": "t",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "random", "metric": "loss", "max_trials": 2},
    "checkpoint_storage": {"type": "shared_fs", "host_path": "/ckpt"},
    "reproducibility": {"experiment_seed": 1},
}

BAD: list[tuple[dict[str, Any], str]] = [
    ({"lr": {"type": "int", "minval": "1", "maxval": 3}}, "hyperparameters.lr.minval"),
    ({"lr": {"type": "int", "minval": True, "maxval": 3}}, "hyperparameters.lr.minval"),
    ({"lr": {"type": "double", "maxval": 3}}, "hyperparameters.lr.minval"),
    ({"lr": {"type": "double", "minval": 3, "maxval": 1}}, "hyperparameters.lr"),
    ({"lr": {"type": "int", "minval": 2, "maxval": 2}}, "hyperparameters.lr"),
    ({"lr": {"type": "double", "minval": float("-inf"), "maxval": 1}}, "hyperparameters.lr.minval"),
    ({"lr": {"type": "log", "minval": 0, "maxval": float("nan")}}, "hyperparameters.lr.maxval"),
    ({"lr": {"type": "log", "minval": -3, "maxval": -1, "base": 1}}, "hyperparameters.lr.base"),
    ({"lr": {"type": "log", "minval": -3, "maxval": -1, "base": 0}}, "hyperparameters.lr.base"),
    ({"c": {"type": "categorical", "vals": []}}, "hyperparameters.c.vals"),
    ({"c": {"type": "const"}}, "hyperparameters.c.val"),
    ({"opt": {"lr": {"type": "float", "minval": 0}}}, "hyperparameters.opt.lr.type"),
    ({"n": {"type": "int", "minval": 1, "maxval": 3, "count": 0}}, "hyperparameters.n.count"),
    ({"n": {"type": "int", "minval": 1, "maxval": 3, "step": 1}}, "hyperparameters.n.step"),
    ({"n": {"type": "int", "minval": 1, "maxvl": 3}}, "hyperparameters.n.maxval"),
]


def _config_error(hyperparameters: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_experiment_config({**BASE, "hyperparameters": hyperparameters})
    return info.value


@pytest.mark.parametrize(("raw", "path"), BAD)
def test_the_searcher_refuses_what_the_config_refuses_with_the_same_message(
    raw: dict[str, Any], path: str
) -> None:
    config_error = _config_error(raw)
    assert config_error.field_path == path
    with pytest.raises(ValueError) as info:
        parse_hyperparameters(raw)
    assert str(info.value) == str(config_error)
    assert isinstance(info.value, ConfigError) and info.value.field_path == path


def test_the_searchers_space_is_the_configs_model() -> None:
    raw = {
        "lr": {"type": "log", "minval": -4, "maxval": -2},
        "layers": [64, 32],
        "opt": {"m": {"type": "double", "minval": 0.5, "maxval": 0.6}, "name": "sgd"},
    }
    cfg = parse_experiment_config({**BASE, "hyperparameters": raw})
    space = parse_hyperparameters(raw)
    assert space == cfg.hyperparameters
    assert isinstance(space["lr"], hp.LogHP) and space["lr"].base == 10.0
    assert space["layers"] == hp.ConstHP(val=[64, 32])
    # The stored (resolved) section reads back as the same space.
    assert parse_hyperparameters(cfg.to_dict()["hyperparameters"]) == space


def test_a_null_constant_is_a_value_in_both_and_sampled_as_null() -> None:
    raw = {"a": None, "b": {"type": "const", "val": None}}
    cfg = parse_experiment_config({**BASE, "hyperparameters": raw})
    assert cfg.to_dict()["hyperparameters"] == {
        "a": {"type": "const", "val": None},
        "b": {"type": "const", "val": None},
    }
    assert sample_all(parse_hyperparameters(raw), random.Random(0)) == {"a": None, "b": None}


def test_an_accepted_config_builds_its_searcher() -> None:
    """What the master stores at creation is what its searcher pass will parse again."""
    raw = {
        "n": {"type": "int", "minval": 1, "maxval": 3, "count": 3},
        "lr": {"type": "log", "minval": -3, "maxval": -1, "base": 2},
        "act": {"type": "categorical", "vals": ["relu", "tanh"]},
        "nested": {"x": {"type": "double", "minval": 0, "maxval": 1}, "c": None},
    }
    resolved = parse_experiment_config({**BASE, "hyperparameters": raw}).to_dict()
    searcher = new_searcher(resolved["searcher"], resolved["hyperparameters"], 7)
    (first, *_) = searcher.initial_trials()
    assert set(first.hparams) == {"n", "lr", "act", "nested"}  # type: ignore[attr-defined]
