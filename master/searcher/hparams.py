"""Hyperparameter definitions (Determined 0.38 ``hyperparameters:``), sampling and grids.

Accepted forms, as in the experiment YAML:

* ``{type: const, val: V}`` and any bare value (``lr: 0.1``, ``layers: [64, 32]``): constant.
* ``{type: int, minval, maxval, count?}``: an integer in ``[minval, maxval]`` (both ends included,
  as documented; Determined's own sampler never drew ``maxval``).
* ``{type: double, minval, maxval, count?}``: a float drawn uniformly from ``[minval, maxval]``.
* ``{type: log, minval, maxval, base?, count?}``: ``base ** u`` with ``u`` uniform in
  ``[minval, maxval]`` (the bounds are exponents; ``base`` is expconf's default, 10, unless
  given).
* ``{type: categorical, vals: [...]}``: one of ``vals``.
* a dict without ``type``: a nested group of hyperparameters, sampled recursively.

``count`` is only used by the grid searcher: the number of evenly spaced grid points (for ``int``,
clamped to the number of integers in the range). Keys are visited in sorted order so that
sampling depends on the seed only, never on dict order.
"""

from __future__ import annotations

import copy
import itertools
import math
import random
from dataclasses import dataclass

from det.common.jsontypes import JSONObject, JSONValue
from det.master.expconf.hyperparameters import DEFAULT_LOG_BASE, HP_TYPES


@dataclass(frozen=True)
class ConstHP:
    val: JSONValue


@dataclass(frozen=True)
class IntHP:
    minval: int
    maxval: int
    count: int | None = None


@dataclass(frozen=True)
class DoubleHP:
    minval: float
    maxval: float
    count: int | None = None


@dataclass(frozen=True)
class LogHP:
    minval: float
    maxval: float
    base: float = DEFAULT_LOG_BASE
    count: int | None = None


@dataclass(frozen=True)
class CategoricalHP:
    vals: tuple[JSONValue, ...]


@dataclass(frozen=True)
class NestedHP:
    items: tuple[tuple[str, HParam], ...]


HParam = ConstHP | IntHP | DoubleHP | LogHP | CategoricalHP | NestedHP


@dataclass(frozen=True)
class HParamSpace:
    """A parsed ``hyperparameters:`` section; ``items`` sorted by name."""

    items: tuple[tuple[str, HParam], ...]

    def names(self) -> list[str]:
        return [name for name, _ in self.items]


def _number(raw: JSONObject, key: str, path: str) -> float:
    if key not in raw:
        raise ValueError(f"{path}.{key}: required")
    val = raw[key]
    if isinstance(val, bool) or not isinstance(val, int | float):
        raise ValueError(f"{path}.{key}: must be a number, got {val!r}")
    if not math.isfinite(float(val)):
        raise ValueError(f"{path}.{key}: must be finite, got {val!r}")
    return float(val)


def _integer(raw: JSONObject, key: str, path: str) -> int:
    if key not in raw:
        raise ValueError(f"{path}.{key}: required")
    val = raw[key]
    if isinstance(val, bool) or not isinstance(val, int):
        raise ValueError(f"{path}.{key}: must be an integer, got {val!r}")
    return val


def _count(raw: JSONObject, path: str) -> int | None:
    if raw.get("count") is None:
        return None
    count = _integer(raw, "count", path)
    if count < 1:
        raise ValueError(f"{path}.count: must be at least 1, got {count}")
    return count


def _check_range(lo: float, hi: float, path: str) -> None:
    if lo > hi:
        raise ValueError(f"{path}: minval ({lo}) must not exceed maxval ({hi})")


def parse_hparam(raw: JSONValue, path: str) -> HParam:
    """Parse one hyperparameter definition; errors name the field path."""
    if not isinstance(raw, dict):
        return ConstHP(raw)
    if "type" not in raw:
        return NestedHP(
            tuple((str(k), parse_hparam(v, f"{path}.{k}")) for k, v in sorted(raw.items()))
        )
    kind = raw["type"]
    if kind == "const":
        if "val" not in raw:
            raise ValueError(f"{path}.val: required")
        return ConstHP(raw["val"])
    if kind == "int":
        lo, hi = _integer(raw, "minval", path), _integer(raw, "maxval", path)
        _check_range(lo, hi, path)
        return IntHP(lo, hi, _count(raw, path))
    if kind == "double":
        dlo, dhi = _number(raw, "minval", path), _number(raw, "maxval", path)
        _check_range(dlo, dhi, path)
        return DoubleHP(dlo, dhi, _count(raw, path))
    if kind == "log":
        llo, lhi = _number(raw, "minval", path), _number(raw, "maxval", path)
        _check_range(llo, lhi, path)
        base = _number(raw, "base", path) if raw.get("base") is not None else DEFAULT_LOG_BASE
        if base <= 0 or base == 1:
            raise ValueError(f"{path}.base: must be positive and not 1, got {base}")
        return LogHP(llo, lhi, base, _count(raw, path))
    if kind == "categorical":
        vals = raw.get("vals")
        if not isinstance(vals, list) or not vals:
            raise ValueError(f"{path}.vals: must be a non-empty list")
        return CategoricalHP(tuple(vals))
    raise ValueError(f"{path}.type: must be one of {', '.join(HP_TYPES)}, got {kind!r}")


def parse_hyperparameters(raw: JSONValue) -> HParamSpace:
    """Parse the experiment config's ``hyperparameters`` dict (``None`` means empty)."""
    if raw is None:
        return HParamSpace(())
    if not isinstance(raw, dict):
        raise ValueError("hyperparameters: must be a mapping")
    return HParamSpace(
        tuple((str(k), parse_hparam(v, f"hyperparameters.{k}")) for k, v in sorted(raw.items()))
    )


def sample_one(hp: HParam, rng: random.Random) -> JSONValue:
    if isinstance(hp, ConstHP):
        return copy.deepcopy(hp.val)
    if isinstance(hp, IntHP):
        return rng.randint(hp.minval, hp.maxval)
    if isinstance(hp, DoubleHP):
        return rng.uniform(hp.minval, hp.maxval)
    if isinstance(hp, LogHP):
        return float(hp.base ** rng.uniform(hp.minval, hp.maxval))
    if isinstance(hp, CategoricalHP):
        return copy.deepcopy(hp.vals[rng.randrange(len(hp.vals))])
    return {name: sample_one(sub, rng) for name, sub in hp.items}


def sample_all(space: HParamSpace, rng: random.Random) -> JSONObject:
    """One random point of the space."""
    return {name: sample_one(hp, rng) for name, hp in space.items}


def _round_half_away(x: float) -> int:
    """Round half away from zero (Go's math.Round), not Python's round-half-to-even."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def grid_values(hp: HParam, path: str) -> list[JSONValue]:
    """The grid axis of one non-nested hyperparameter (Determined's spacing rules)."""
    if isinstance(hp, ConstHP):
        return [hp.val]
    if isinstance(hp, CategoricalHP):
        return list(hp.vals)
    if isinstance(hp, NestedHP):
        raise TypeError("nested hyperparameters have no single grid axis")
    if hp.count is None:
        raise ValueError(f"{path}.count: required by the grid searcher")
    if isinstance(hp, IntHP):
        count = min(hp.count, hp.maxval - hp.minval + 1)
        if count == 1:
            return [_round_half_away((hp.minval + hp.maxval) / 2)]
        span = hp.maxval - hp.minval
        return [_round_half_away(hp.minval + i * span / (count - 1)) for i in range(count)]
    count = hp.count
    if count == 1:
        points = [(hp.minval + hp.maxval) / 2.0]
    else:
        points = [hp.minval + i * (hp.maxval - hp.minval) / (count - 1) for i in range(count)]
    if isinstance(hp, LogHP):
        return [float(hp.base**p) for p in points]
    return [p for p in points]


def _axes(
    items: tuple[tuple[str, HParam], ...], route: tuple[str, ...]
) -> list[tuple[tuple[str, ...], list[JSONValue]]]:
    out: list[tuple[tuple[str, ...], list[JSONValue]]] = []
    for name, hp in items:
        sub_route = (*route, name)
        if isinstance(hp, NestedHP):
            out.extend(_axes(hp.items, sub_route))
        else:
            out.append((sub_route, grid_values(hp, "hyperparameters." + ".".join(sub_route))))
    return out


def _group(node: JSONObject, name: str) -> JSONObject:
    """``node[name]``, a nested group's dict (created empty when absent)."""
    child = node.setdefault(name, {})
    assert isinstance(child, dict), name  # only groups are set at a group's name
    return child


def _put(sample: JSONObject, route: tuple[str, ...], value: JSONValue) -> None:
    node = sample
    for key in route[:-1]:
        node = _group(node, key)
    node[route[-1]] = copy.deepcopy(value)


def grid_points(space: HParamSpace) -> list[JSONObject]:
    """The cartesian product of every axis; nested groups are expanded leaf by leaf.

    Order: the first hyperparameter (by sorted name) varies slowest.
    """
    axes = _axes(space.items, ())
    points: list[JSONObject] = []
    for combo in itertools.product(*(values for _, values in axes)):
        sample: JSONObject = {}
        for (route, _), value in zip(axes, combo, strict=True):
            _put(sample, route, value)
        points.append(sample)
    # Empty nested groups have no axis; keep them as empty dicts like sampling does.
    for point in points:
        _fill_empty_groups(space.items, point)
    return points


def _fill_empty_groups(items: tuple[tuple[str, HParam], ...], node: JSONObject) -> None:
    for name, hp in items:
        if isinstance(hp, NestedHP):
            _fill_empty_groups(hp.items, _group(node, name))


def grid_size(space: HParamSpace) -> int:
    return math.prod(len(values) for _, values in _axes(space.items, ()))
