"""Minimal validation of the ``searcher:`` section into a frozen ``SearcherConfig``.

The experiment-config model validates the full schema; this module checks only what the search
methods rely on, so they can be driven from a plain dict (tests, the simulator, preview). Unknown
keys are ignored. Errors are ``ValueError("searcher.<field>: <reason>")``.

Defaults are the experiment config's (``det.master.expconf.searcher``, Determined 0.38's):
``smaller_is_better: true``, ``max_concurrent_trials: 16``
(``0`` means no limit; for ``async_halving`` it means ``divisor ** (num_rungs - 1)`` capped by
``max_trials``, for ``adaptive_asha`` see ``asha.bracket_max_concurrent``), ``divisor: 4``, ``mode: standard``, ``max_rungs: 5``. The legacy
``max_length: {batches: N}`` still works for the ASHA searchers in place of
``time_metric: batches`` + ``max_time: N``.

``sampler`` (``random`` or ``tpe``, for ``random`` and the ASHA searchers) is det's own: Determined
configs never set it and get uniform sampling, as in Determined.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from det.master.expconf.base import default_of
from det.master.expconf.searcher import (
    AdaptiveAshaSearcher,
    RandomSearcher,
    _AshaBase,
    _SearcherBase,
)

SEARCHER_NAMES = ("single", "random", "grid", "async_halving", "adaptive_asha")
# The defaults are the experiment config's (expconf/searcher.py), read from its models.
SMALLER_IS_BETTER: bool = default_of(_SearcherBase, "smaller_is_better")
MAX_CONCURRENT_TRIALS: int = default_of(RandomSearcher, "max_concurrent_trials")
DIVISOR: float = default_of(_AshaBase, "divisor")
MODE: str = default_of(AdaptiveAshaSearcher, "mode")
MAX_RUNGS: int = default_of(AdaptiveAshaSearcher, "max_rungs")
MODES = ("aggressive", "standard", "conservative")
SAMPLERS = ("random", "tpe")


@dataclass(frozen=True)
class SearcherConfig:
    name: str
    metric: str
    smaller_is_better: bool = SMALLER_IS_BETTER
    max_trials: int = 1
    max_concurrent_trials: int = MAX_CONCURRENT_TRIALS
    # ASHA family.
    time_metric: str | None = None
    max_time: float | None = None
    divisor: float = DIVISOR
    num_rungs: int = 0
    mode: str = MODE
    max_rungs: int = MAX_RUNGS
    bracket_rungs: tuple[int, ...] = ()
    # Deprecated ``max_length`` (its number of units), passed through to trial_target_length.
    max_length: float | None = None
    # det's own: how new trials' hyperparameters are chosen (random, ASHA); see tpe.py.
    sampler: str = "random"


def _field(name: str) -> str:
    return f"searcher.{name}"


def _int(raw: Mapping[str, Any], key: str, default: int | None, *, minimum: int) -> int:
    val = raw.get(key, default)
    if val is None:
        raise ValueError(f"{_field(key)}: required")
    if isinstance(val, bool) or not isinstance(val, int):
        raise ValueError(f"{_field(key)}: must be an integer, got {val!r}")
    if val < minimum:
        raise ValueError(f"{_field(key)}: must be at least {minimum}, got {val}")
    return val


def _positive(raw: Mapping[str, Any], key: str) -> float:
    val = raw[key]
    if isinstance(val, bool) or not isinstance(val, int | float) or not math.isfinite(val):
        raise ValueError(f"{_field(key)}: must be a number, got {val!r}")
    if val <= 0:
        raise ValueError(f"{_field(key)}: must be positive, got {val}")
    return float(val)


def _legacy_length(raw: Mapping[str, Any]) -> tuple[str | None, float | None]:
    """``max_length: N`` or ``max_length: {unit: N}`` → (unit or None, N)."""
    val = raw.get("max_length")
    if val is None:
        return None, None
    if isinstance(val, Mapping):
        if len(val) != 1:
            raise ValueError(f"{_field('max_length')}: must have exactly one unit, got {dict(val)}")
        unit, units = next(iter(val.items()))
        return str(unit), _positive({"max_length": units}, "max_length")
    return None, _positive(raw, "max_length")


def parse_searcher_config(raw: Mapping[str, Any]) -> SearcherConfig:
    if not isinstance(raw, Mapping):
        raise ValueError("searcher: must be a mapping")
    # A dumped config model spells unset fields as null: treat them as absent.
    raw = {k: v for k, v in raw.items() if v is not None}
    name = raw.get("name")
    if name not in SEARCHER_NAMES:
        raise ValueError(
            f"{_field('name')}: must be one of {', '.join(SEARCHER_NAMES)}, got {name!r}"
        )
    metric = raw.get("metric")
    if not isinstance(metric, str) or not metric:
        raise ValueError(f"{_field('metric')}: required (the validation metric to optimize)")
    smaller = raw.get("smaller_is_better", SMALLER_IS_BETTER)
    if not isinstance(smaller, bool):
        raise ValueError(f"{_field('smaller_is_better')}: must be true or false")
    legacy_unit, legacy_units = _legacy_length(raw)
    common: dict[str, Any] = {
        "name": name,
        "metric": metric,
        "smaller_is_better": smaller,
        "max_length": legacy_units,
    }
    if name == "single":
        return SearcherConfig(**common, max_trials=1, max_concurrent_trials=1)
    concurrency = _int(raw, "max_concurrent_trials", MAX_CONCURRENT_TRIALS, minimum=0)
    if name == "grid":
        return SearcherConfig(**common, max_trials=0, max_concurrent_trials=concurrency)
    max_trials = _int(raw, "max_trials", None, minimum=1)
    sampler = raw.get("sampler", "random")
    if sampler not in SAMPLERS:
        raise ValueError(
            f"{_field('sampler')}: must be one of {', '.join(SAMPLERS)}, got {sampler!r}"
        )
    common["sampler"] = sampler
    if name == "random":
        return SearcherConfig(**common, max_trials=max_trials, max_concurrent_trials=concurrency)

    time_metric = raw.get("time_metric", legacy_unit)
    if not isinstance(time_metric, str) or not time_metric:
        raise ValueError(f"{_field('time_metric')}: required for {name} (e.g. batches)")
    if raw.get("max_time") is not None:
        max_time = _positive(raw, "max_time")
    elif legacy_units is not None:
        max_time = legacy_units
    else:
        raise ValueError(f"{_field('max_time')}: required for {name}")
    divisor = _positive(raw, "divisor") if "divisor" in raw else DIVISOR
    if divisor <= 1:
        raise ValueError(f"{_field('divisor')}: must be greater than 1, got {divisor}")
    asha: dict[str, Any] = {
        **common,
        "max_trials": max_trials,
        "max_concurrent_trials": concurrency,
        "time_metric": time_metric,
        "max_time": max_time,
        "divisor": divisor,
    }
    if name == "async_halving":
        return SearcherConfig(**asha, num_rungs=_int(raw, "num_rungs", None, minimum=1))

    mode = raw.get("mode", MODE)
    if mode not in MODES:
        raise ValueError(f"{_field('mode')}: must be one of {', '.join(MODES)}, got {mode!r}")
    bracket_rungs = raw.get("bracket_rungs") or []
    if not isinstance(bracket_rungs, list) or not all(
        isinstance(r, int) and not isinstance(r, bool) and r >= 1 for r in bracket_rungs
    ):
        raise ValueError(f"{_field('bracket_rungs')}: must be a list of positive integers")
    return SearcherConfig(
        **asha,
        mode=mode,
        max_rungs=_int(raw, "max_rungs", MAX_RUNGS, minimum=1),
        bracket_rungs=tuple(bracket_rungs),
    )
