"""Sampling and grids over the ``hyperparameters:`` section (Determined 0.38's forms).

There is one hyperparameter model, the experiment config's (``det.master.expconf.hyperparameters``:
``ConstHP``, ``IntHP``, ``DoubleHP``, ``LogHP``, ``CategoricalHP``; a nested group is a dict of
them). ``parse_hyperparameters`` validates a plain dict with it (a stored config's section, a
snapshot's, a test's), with the rules and error messages of the experiment config's parse, so
what the master accepts at creation is exactly what the searcher can search.

What each kind means here:

* ``const`` (and any bare value): always ``val``.
* ``int``: an integer in ``[minval, maxval]`` (both ends included, as documented; Determined's
  own sampler never drew ``maxval``).
* ``double``: a float drawn uniformly from ``[minval, maxval]``.
* ``log``: ``base ** u`` with ``u`` uniform in ``[minval, maxval]`` (the bounds are exponents).
* ``categorical``: one of ``vals``.
* a nested group: sampled recursively.

``count`` is only used by the grid searcher: the number of evenly spaced grid points (for ``int``,
clamped to the number of integers in the range). Keys are visited in sorted order so that
sampling depends on the seed only, never on dict order.
"""

from __future__ import annotations

import copy
import itertools
import math
import random
from typing import TypeAlias

from det.common.jsontypes import JSONObject, JSONValue
from det.master.expconf.hyperparameters import (
    GRID_NEEDS_COUNT,
    AnyHP,
    CategoricalHP,
    ConstHP,
    HPGroup,
    IntHP,
    LogHP,
    RangeHP,
    parse_section,
)

# A validated ``hyperparameters:`` section, as the searcher reads it.
HParamSpace: TypeAlias = HPGroup
Route: TypeAlias = tuple[str, ...]


def parse_hyperparameters(raw: JSONValue) -> HParamSpace:
    """The experiment config's ``hyperparameters`` (``None`` means empty), validated by the
    config's own model; ``ValueError`` names every bad field."""
    return parse_section(raw)


def items(group: HParamSpace) -> list[tuple[str, AnyHP | HParamSpace]]:
    """A group's entries in name order: the order every walk of the space takes."""
    return sorted(group.items())


def leaves(group: HParamSpace, route: Route = ()) -> list[tuple[Route, RangeHP]]:
    """Every hyperparameter with a range of values (not const), nested groups walked, in order."""
    out: list[tuple[Route, RangeHP]] = []
    for name, hp in items(group):
        if isinstance(hp, dict):
            out += leaves(hp, (*route, name))
        elif not isinstance(hp, ConstHP):
            out.append(((*route, name), hp))
    return out


def sample_one(hp: AnyHP | HParamSpace, rng: random.Random) -> JSONValue:
    if isinstance(hp, dict):
        return sample_all(hp, rng)
    if isinstance(hp, ConstHP):
        return copy.deepcopy(hp.val)
    if isinstance(hp, IntHP):
        return rng.randint(hp.minval, hp.maxval)
    if isinstance(hp, LogHP):
        return float(hp.base ** rng.uniform(hp.minval, hp.maxval))
    if isinstance(hp, CategoricalHP):
        return copy.deepcopy(hp.vals[rng.randrange(len(hp.vals))])
    return rng.uniform(hp.minval, hp.maxval)


def sample_all(space: HParamSpace, rng: random.Random) -> JSONObject:
    """One random point of the space."""
    return {name: sample_one(hp, rng) for name, hp in items(space)}


def _round_half_away(x: float) -> int:
    """Round half away from zero (Go's math.Round), not Python's round-half-to-even."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def grid_values(hp: AnyHP, path: str) -> list[JSONValue]:
    """The grid axis of one non-nested hyperparameter (Determined's spacing rules)."""
    if isinstance(hp, ConstHP):
        return [hp.val]
    if isinstance(hp, CategoricalHP):
        return list(hp.vals)
    if hp.count is None:
        raise ValueError(f"{path}.count: {GRID_NEEDS_COUNT}")
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


def _axes(group: HParamSpace, route: Route) -> list[tuple[Route, list[JSONValue]]]:
    out: list[tuple[Route, list[JSONValue]]] = []
    for name, hp in items(group):
        sub_route = (*route, name)
        if isinstance(hp, dict):
            out.extend(_axes(hp, sub_route))
        else:
            out.append((sub_route, grid_values(hp, "hyperparameters." + ".".join(sub_route))))
    return out


def _group(node: JSONObject, name: str) -> JSONObject:
    """``node[name]``, a nested group's dict (created empty when absent)."""
    child = node.setdefault(name, {})
    assert isinstance(child, dict), name  # only groups are set at a group's name
    return child


def _put(sample: JSONObject, route: Route, value: JSONValue) -> None:
    node = sample
    for key in route[:-1]:
        node = _group(node, key)
    node[route[-1]] = copy.deepcopy(value)


def grid_points(space: HParamSpace) -> list[JSONObject]:
    """The cartesian product of every axis; nested groups are expanded leaf by leaf.

    Order: the first hyperparameter (by sorted name) varies slowest.
    """
    axes = _axes(space, ())
    points: list[JSONObject] = []
    for combo in itertools.product(*(values for _, values in axes)):
        sample: JSONObject = {}
        for (route, _), value in zip(axes, combo, strict=True):
            _put(sample, route, value)
        points.append(sample)
    # Empty nested groups have no axis; keep them as empty dicts like sampling does.
    for point in points:
        _fill_empty_groups(space, point)
    return points


def _fill_empty_groups(group: HParamSpace, node: JSONObject) -> None:
    for name, hp in items(group):
        if isinstance(hp, dict):
            _fill_empty_groups(hp, _group(node, name))


def grid_size(space: HParamSpace) -> int:
    return math.prod(len(values) for _, values in _axes(space, ()))
