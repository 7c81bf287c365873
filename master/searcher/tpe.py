"""``sampler: tpe``: a Tree-structured Parzen Estimator, refined by a Gaussian process late in a
search, proposing the hyperparameters of new trials.

det's own extension (Determined has no model-based sampler); ``random`` and the ASHA searchers use
it when ``searcher.sampler`` is ``tpe``. It changes *which* configurations are tried, never when
trials are created or stopped, so the searcher's own rules (rungs, ``max_trials``, concurrency)
keep their Determined meaning.

What it learns from, as BOHB does for Hyperband: every validation the searcher sees. A trial is
summarised by the highest *level* it reached (for ASHA: how many rungs of ``max_time /
divisor ** k`` its time has passed; 0 for random search) and its loss when it first reached that
level. Trials are ranked by level, then loss, so a trial the searcher let train longer ranks above
one it stopped, and trials stopped at the same rung compare by the metric they were judged on.
The best ``min(ceil(0.1 n), 25)`` form the "good" set, the rest the "bad" set. Each set gets a
multivariate Parzen density on the unit cube (one product kernel per trial plus a broad prior),
and the new trial is the one of 24 candidates drawn from the good density that maximises
``l(x) / g(x)``.

Kernel widths, per trial and per dimension, follow the data as Optuna's TPE does: the larger of
the gaps to the trial's neighbours along that axis (the outermost trials: the inner gap), clipped
to at least ``1 / min(100, n + 2)`` of the range, so the kernels narrow as the good trials
cluster. (A fixed Scott's-rule width, ``0.2 n^(-1/(d+4))``, kept them about 0.15 of the range
wide in six dimensions: the search found the best region but could not refine within it.) The
good trials' kernels are weighted by rank, from ``1 + RANK_WEIGHT`` for the best to 1 for the
last, so candidates are drawn more often near the best trials. Integers are modelled on cells
``[v - 0.5, v + 0.5]``, so every value of the range, the end values included, gets the same
share of the unit interval.

Refinement, once the highest level reached holds ``3 d + 2`` trials (``d`` modelled
hyperparameters; at least 8) with a finite loss: a Gaussian process (``gp.py``: Matern-5/2, a
length scale per axis and a noise level chosen by marginal likelihood) is fitted to the losses of
the best 40 of them, and the new trial is, of 32 draws from the good density and 32 perturbations
(sd 0.03 of each range) of the 5 best such trials, the one of lowest posterior mean. The Parzen
estimator alone found the best region of Hartmann-6 but refined within it slowly, and its choice
followed single noisy losses; the process averages the noise over neighbouring trials and
interpolates between them. Below that count (the model would be fitted on too few points) the
``l(x) / g(x)`` choice stands. Cost: at most 40 points per fit, so a proposal's cost stops
growing with the search's length.

Until 10 trials have reported, or when the space has no dimension to model, new trials are sampled
uniformly exactly as ``random`` would.

Every draw comes from the search's seeded RNG, so a search is reproducible; the observations are
part of the searcher snapshot, so a restored search proposes what the original would have.
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass

from pydantic import TypeAdapter
from typing_extensions import TypedDict

from det.common.jsontypes import JSONObject, JSONValue
from det.master.expconf.hyperparameters import (
    CategoricalHP,
    ConstHP,
    DoubleHP,
    IntHP,
    LogHP,
    RangeHP,
)

from . import gp
from .base import decode_float, encode_float, load_state
from .hparams import HParamSpace, items, leaves, sample_all

N_STARTUP = 10
N_CANDIDATES = 24
MAX_GOOD = 25
# The bad density is fit on at most this many trials (evenly spaced through the ranking), which
# bounds the cost of a proposal on long searches without changing the density's shape much.
MAX_BAD = 200
PRIOR_WEIGHT = 1.0
PRIOR_SIGMA = 1.0
# The good trials' kernels weigh 1 + RANK_WEIGHT (best) down to 1 (last of the good set).
RANK_WEIGHT = 5.0
CAT_PRIOR_MIX = 0.2  # how much a categorical kernel spreads over the other values
# Refinement by a Gaussian process (see the module docstring): from GP_MIN_PER_DIM x d + 2
# (at least GP_MIN) trials at the highest level on, fit on at most GP_MAX of them (the best),
# choose among GP_CANDIDATES draws of the good density and GP_LOCAL perturbations (sd LOCAL_SIGMA
# per axis) of the LOCAL_CENTERS best.
GP_MIN = 8
GP_MIN_PER_DIM = 3
GP_MAX = 40
GP_CANDIDATES = 32
GP_LOCAL = 32
LOCAL_CENTERS = 5
LOCAL_SIGMA = 0.03
GP_BETA = 0.0  # the candidate minimising mean - GP_BETA * sd is proposed


@dataclass(frozen=True)
class _Dim:
    route: tuple[str, ...]
    hp: RangeHP


def _dims(space: HParamSpace) -> list[_Dim]:
    return [_Dim(route, hp) for route, hp in leaves(space)]


def _span(hp: IntHP | DoubleHP | LogHP) -> tuple[float, float]:
    if isinstance(hp, IntHP):  # one cell of width 1 per integer, the end values included
        return hp.minval - 0.5, hp.maxval + 0.5
    return float(hp.minval), float(hp.maxval)


def _encode(dim: _Dim, value: JSONValue) -> float:
    """A numeric value's place in [0, 1]; a categorical value's index."""
    hp = dim.hp
    if isinstance(hp, CategoricalHP):
        return float(next((i for i, v in enumerate(hp.vals) if v == value), 0))
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"hyperparameters.{'.'.join(dim.route)}: expected a number: {value!r}")
    lo, hi = _span(hp)
    x = math.log(value, hp.base) if isinstance(hp, LogHP) else float(value)
    return 0.5 if hi == lo else min(max((x - lo) / (hi - lo), 0.0), 1.0)


def _decode(dim: _Dim, u: float) -> JSONValue:
    hp = dim.hp
    if isinstance(hp, CategoricalHP):
        return copy.deepcopy(hp.vals[int(u)])
    lo, hi = _span(hp)
    x = lo + u * (hi - lo)
    if isinstance(hp, IntHP):
        return min(max(math.floor(x + 0.5), hp.minval), hp.maxval)
    if isinstance(hp, LogHP):
        return float(hp.base**x)
    return x


def _get(hparams: JSONObject, route: tuple[str, ...]) -> JSONValue:
    value: JSONValue = hparams
    for key in route:
        if not isinstance(value, dict):
            raise ValueError(f"hyperparameters.{'.'.join(route)}: not in {hparams!r}")
        value = value[key]
    return value


def _build(group: HParamSpace, values: dict[tuple[str, ...], JSONValue],
           route: tuple[str, ...] = ()) -> JSONObject:  # fmt: skip
    out: JSONObject = {}
    for name, hp in items(group):
        sub = (*route, name)
        if isinstance(hp, dict):
            out[name] = _build(hp, values, sub)
        elif isinstance(hp, ConstHP):
            out[name] = copy.deepcopy(hp.val)
        else:
            out[name] = values[sub]
    return out


def _log_norm_cdf_mass(mu: float, sigma: float) -> float:
    """log P(0 <= X <= 1) for X ~ N(mu, sigma): the truncation constant of a kernel."""
    z = 1.0 / (sigma * math.sqrt(2.0))
    mass = 0.5 * (math.erf((1.0 - mu) * z) - math.erf(-mu * z))
    return math.log(max(mass, 1e-300))


def _widths(dims: list[_Dim], points: list[list[float]]) -> list[list[float]]:
    """Per point and dimension, the kernel width on [0, 1]: the larger gap to its neighbours
    along the axis (the first and last point: the gap on the inner side; one point alone: its
    larger distance to the ends), at least ``1 / min(100, n + 2)``. Categorical axes: unused."""
    n = len(points)
    out = [[1.0] * len(dims) for _ in points]
    floor = 1.0 / min(100.0, n + 2.0)
    for i, dim in enumerate(dims):
        if isinstance(dim.hp, CategoricalHP):
            continue
        order = sorted(range(n), key=lambda j: points[j][i])  # stable: ties keep list order
        xs = [0.0, *(points[j][i] for j in order), 1.0]
        for k, j in enumerate(order):
            left, right = xs[k + 1] - xs[k], xs[k + 2] - xs[k + 1]
            if n >= 2 and k == 0:
                width = right
            elif n >= 2 and k == n - 1:
                width = left
            else:
                width = max(left, right)
            out[j][i] = min(max(width, floor), 1.0)
    return out


class _Parzen:
    """A mixture of product kernels on [0, 1]^d (categorical axes: index kernels)."""

    def __init__(self, dims: list[_Dim], points: list[list[float]], ranked: bool = False) -> None:
        self.dims = dims
        n = len(points)
        widths = _widths(dims, points)
        # ``ranked``: points best first, weighted from 1 + RANK_WEIGHT down to 1.
        weights = [
            1.0 + RANK_WEIGHT * (n - 1 - k) / (n - 1) if ranked and n > 1 else 1.0 for k in range(n)
        ]
        # Components: (weight, centers, sigmas); the prior is one broad component at the middle.
        self.components: list[tuple[float, list[float], list[float]]] = [
            (w, p, s) for w, p, s in zip(weights, points, widths, strict=True)
        ]
        prior = [0.5 if not isinstance(d.hp, CategoricalHP) else -1.0 for d in dims]
        self.components.append((PRIOR_WEIGHT, prior, [PRIOR_SIGMA] * len(dims)))
        total = sum(w for w, _, _ in self.components)
        self.log_weights = [math.log(w / total) for w, _, _ in self.components]
        self.log_mass = [
            [
                0.0 if isinstance(d.hp, CategoricalHP) else _log_norm_cdf_mass(c[i], s[i])
                for i, d in enumerate(dims)
            ]
            for _, c, s in self.components
        ]
        # Per component: its constant part of the log density and (axis, center, 1 / sigma) of
        # its numeric axes, so that log_pdf only adds squares.
        numeric = [i for i, d in enumerate(dims) if not isinstance(d.hp, CategoricalHP)]
        self.categorical = [i for i, d in enumerate(dims) if isinstance(d.hp, CategoricalHP)]
        self.terms = [
            (
                log_w - sum(math.log(s[i]) + masses[i] for i in numeric),
                [(i, c[i], 1.0 / s[i]) for i in numeric],
                c,
            )
            for (_, c, s), log_w, masses in zip(
                self.components, self.log_weights, self.log_mass, strict=True
            )
        ]

    def _cat_log_p(self, dim: _Dim, center: float, value: float) -> float:
        assert isinstance(dim.hp, CategoricalHP)
        k = len(dim.hp.vals)
        if center < 0 or k == 1:  # the prior: uniform over the values
            return -math.log(k)
        keep = 1.0 - CAT_PRIOR_MIX * (k - 1) / k
        return math.log(keep if int(value) == int(center) else (1.0 - keep) / (k - 1))

    def log_pdf(self, x: list[float]) -> float:
        terms = []
        for constant, numeric, centers in self.terms:
            total = constant
            for i, center, inverse in numeric:
                z = (x[i] - center) * inverse
                total -= 0.5 * z * z
            for i in self.categorical:
                total += self._cat_log_p(self.dims[i], centers[i], x[i])
            terms.append(total)
        top = max(terms)
        return top + math.log(sum(math.exp(t - top) for t in terms))

    def sample(self, rng: random.Random) -> list[float]:
        weights = [w for w, _, _ in self.components]
        index = rng.choices(range(len(self.components)), weights=weights)[0]
        _, centers, sigmas = self.components[index]
        out = []
        for i, dim in enumerate(self.dims):
            if isinstance(dim.hp, CategoricalHP):
                k = len(dim.hp.vals)
                if centers[i] < 0 or rng.random() < CAT_PRIOR_MIX:
                    out.append(float(rng.randrange(k)))
                else:
                    out.append(centers[i])
                continue
            for _ in range(100):  # rejection sampling from the truncated kernel
                u = rng.gauss(centers[i], sigmas[i])
                if 0.0 <= u <= 1.0:
                    break
            else:
                u = min(max(centers[i], 0.0), 1.0)
            out.append(u)
        return out


@dataclass
class _Observed:
    """A trial as the sampler sees it: its place in the unit cube, the highest level it reached
    (-1: none yet) and its loss when it first reached that level."""

    units: list[float]
    level: int = -1
    loss: float = math.inf


class _State(TypedDict):
    trials: list[tuple[str, list[float], int, float | str]]  # (request id, units, level, loss)


_STATE = TypeAdapter(_State)


class TPESampler:
    """Proposes hyperparameters from the observations of a search (see the module docstring)."""

    def __init__(self, space: HParamSpace, level_times: list[float]) -> None:
        self.space = space
        self.dims = _dims(space)
        self.level_times = sorted(level_times)
        # request id -> [unit coordinates, level, loss at that level]; insertion = creation order.
        self.trials: dict[str, _Observed] = {}

    def _level(self, time_value: float) -> int:
        return sum(1 for t in self.level_times if time_value >= t * (1 - 1e-9))

    # -- events ----------------------------------------------------------------------------

    def created(self, request_id: str, hparams: JSONObject) -> None:
        self.trials[request_id] = _Observed([_encode(d, _get(hparams, d.route)) for d in self.dims])

    def observe(self, request_id: str, loss: float, time_value: float) -> None:
        """A validation: keeps the loss at the highest level reached (first report there); with
        no levels (random search), the best loss so far."""
        entry = self.trials.get(request_id)
        if entry is None:
            return
        level = self._level(time_value)
        if level > entry.level:
            entry.level, entry.loss = level, loss
        elif level == entry.level and not self.level_times:
            entry.loss = min(entry.loss, loss)

    def forget(self, request_id: str) -> None:
        """An INVALID_HP trial: its configuration says nothing about the metric."""
        self.trials.pop(request_id, None)

    # -- proposals -------------------------------------------------------------------------

    def _ranked(self) -> list[list[float]]:
        seen = [e for e in self.trials.values() if e.level >= 0]
        # Stable sort: equal keys keep creation order, so the ranking is deterministic.
        seen.sort(key=lambda e: (-e.level, e.loss))
        return [e.units for e in seen]

    def suggest(self, rng: random.Random) -> JSONObject:
        ranked = self._ranked()
        if len(ranked) < N_STARTUP or not self.dims:
            return sample_all(self.space, rng)
        n_good = min(math.ceil(0.1 * len(ranked)), MAX_GOOD)
        good, bad = ranked[:n_good], ranked[n_good:]
        if len(bad) > MAX_BAD:
            step = len(bad) / MAX_BAD
            bad = [bad[int(i * step)] for i in range(MAX_BAD)]
        lower = _Parzen(self.dims, good, ranked=True)
        x = self._refine(lower, rng)
        if x is None:
            upper = _Parzen(self.dims, bad)
            best: tuple[float, list[float]] | None = None
            for _ in range(N_CANDIDATES):
                candidate = lower.sample(rng)
                score = lower.log_pdf(candidate) - upper.log_pdf(candidate)
                if best is None or score > best[0]:
                    best = (score, candidate)
            assert best is not None
            x = best[1]
        values = {d.route: _decode(d, u) for d, u in zip(self.dims, x, strict=True)}
        return _build(self.space, values)

    def _refine(self, lower: _Parzen, rng: random.Random) -> list[float] | None:
        """The Gaussian-process step: None (use the TPE choice) until ``GP_MIN`` trials with a
        finite loss share the highest level reached, or when the model cannot be fitted."""
        seen = [e for e in self.trials.values() if e.level >= 0]
        level = max(e.level for e in seen)
        top = [e for e in seen if e.level == level and math.isfinite(e.loss)]
        if len(top) < max(GP_MIN, GP_MIN_PER_DIM * len(self.dims) + 2):
            return None
        top.sort(key=lambda e: e.loss)  # stable: equal losses keep creation order
        top = top[:GP_MAX]
        losses = [e.loss for e in top]
        mean = sum(losses) / len(losses)
        spread = math.sqrt(sum((v - mean) ** 2 for v in losses) / len(losses)) or 1.0
        categorical = frozenset(
            i for i, d in enumerate(self.dims) if isinstance(d.hp, CategoricalHP)
        )
        model = gp.fit([e.units for e in top], [(v - mean) / spread for v in losses], categorical)
        if model is None:
            return None
        candidates = [lower.sample(rng) for _ in range(GP_CANDIDATES)]
        centers = [e.units for e in top[:LOCAL_CENTERS]]
        for _ in range(GP_LOCAL):
            candidates.append(self._perturb(centers[rng.randrange(len(centers))], rng))
        best: tuple[float, list[float]] | None = None
        for candidate in candidates:
            mu, sd = model.predict(candidate)
            score = mu - GP_BETA * sd
            if best is None or score < best[0]:
                best = (score, candidate)
        assert best is not None
        return best[1]

    def _perturb(self, center: list[float], rng: random.Random) -> list[float]:
        """A draw near ``center``: numeric axes N(center, LOCAL_SIGMA) truncated to [0, 1];
        a categorical axis keeps its value but for a ``CAT_PRIOR_MIX`` chance of a uniform one."""
        out = []
        for i, dim in enumerate(self.dims):
            if isinstance(dim.hp, CategoricalHP):
                keep = rng.random() >= CAT_PRIOR_MIX
                out.append(center[i] if keep else float(rng.randrange(len(dim.hp.vals))))
                continue
            for _ in range(100):
                u = rng.gauss(center[i], LOCAL_SIGMA)
                if 0.0 <= u <= 1.0:
                    break
            else:
                u = min(max(center[i], 0.0), 1.0)
            out.append(u)
        return out

    # -- persistence -----------------------------------------------------------------------

    def snapshot(self) -> JSONObject:
        return {"trials": [[rid, [u for u in e.units], e.level, encode_float(e.loss)]
                           for rid, e in self.trials.items()]}  # fmt: skip

    def restore(self, state: JSONValue) -> None:
        loaded = load_state(_STATE, state, "sampler")
        self.trials = {
            rid: _Observed(list(units), level, decode_float(loss))
            for rid, units, level, loss in loaded["trials"]
        }
