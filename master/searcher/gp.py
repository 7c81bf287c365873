"""A small Gaussian-process regression in pure Python, for the ``tpe`` sampler's refinement step.

Matern-5/2 kernel with one length scale per axis (categorical axes: distance 0 for the same
value, 1 otherwise, before scaling), unit signal variance (the targets are standardised) and a
noise variance. The noise and the length scales are chosen by the log marginal likelihood: the
best of a few noise levels at a common length scale, then passes of per-axis halving or doubling
that keep a change only when the likelihood improves. Every step is plain floating-point
arithmetic in a fixed order, so the same observations give the same model on every run.

Cost: one fit is ``3 + 4 d`` Cholesky factorisations of an ``n x n`` matrix (``n`` is capped by
the caller), one prediction ``O(n^2)``. The loops run in C where the order of the arithmetic
allows it: a model's squared distances axis by axis over all pairs at once (``map``), dot
products with ``sum(map(mul, ...))``; a squared distance is summed over the axes in their order
(the same in the matrix and in a prediction, so a prediction at a sample matches the matrix).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import repeat
from operator import add, mul

_SQRT5 = math.sqrt(5.0)
NOISES = (1e-3, 0.03, 0.3)  # noise variances tried, relative to the standardised targets
LENGTH_SCALE = 0.3  # the common starting length scale on the unit cube
MIN_LENGTH_SCALE, MAX_LENGTH_SCALE = 0.02, 4.0
PASSES = 2


class AxisGaps:
    """The squared per-axis gaps of every pair of points (``j < i``, row by row), one list per
    axis: what a fit's ``3 + 4 d`` models share."""

    def __init__(self, points: Sequence[Sequence[float]], categorical: frozenset[int]) -> None:
        n = len(points)
        dims = len(points[0]) if points else 0
        self.n = n
        self.by_axis: list[list[float]] = []
        for axis in range(dims):
            column = [p[axis] for p in points]
            self.by_axis.append(_squared_gaps(column, axis in categorical))

    def squared_distances(self, inverse_scales: Sequence[float]) -> list[float]:
        """Per pair, the sum over the axes (in order) of ``gap^2 * inverse_scale^2``."""
        total: list[float] = [0.0] * (self.n * (self.n - 1) // 2)
        for column, inverse in zip(self.by_axis, inverse_scales, strict=True):
            total = list(map(add, total, map(mul, column, repeat(inverse * inverse))))
        return total


def _squared_gaps(column: list[float], categorical: bool) -> list[float]:
    out: list[float] = []
    for i, a in enumerate(column):
        out.extend(_squared_gaps_to(a, column[:i], categorical))
    return out


def _squared_gaps_to(value: float, column: Sequence[float], categorical: bool) -> list[float]:
    """Per entry of ``column``, the squared gap the length scale divides: the difference's
    square, or for a categorical axis 0.0 for the same value and 1.0 otherwise."""
    if categorical:
        index = int(value)
        return [0.0 if int(b) == index else 1.0 for b in column]
    gaps = [value - b for b in column]
    return list(map(mul, gaps, gaps))


def _matern(squared: float) -> float:
    """Matern-5/2 of a scaled squared distance."""
    r = math.sqrt(squared)
    return (1.0 + _SQRT5 * r + 5.0 * squared / 3.0) * math.exp(-_SQRT5 * r)


class GP:
    """A fitted model of ``y`` over points ``x`` (lists of unit coordinates)."""

    def __init__(
        self,
        points: Sequence[Sequence[float]],
        targets: Sequence[float],
        inverse_scales: Sequence[float],
        noise: float,
        categorical: frozenset[int] = frozenset(),
        gaps: AxisGaps | None = None,
    ) -> None:
        self.points = [list(p) for p in points]
        self.inverse_scales = list(inverse_scales)
        self.noise = noise
        self.categorical = categorical
        n = len(self.points)
        if gaps is None:
            gaps = AxisGaps(self.points, categorical)
        values = list(map(_matern, gaps.squared_distances(self.inverse_scales)))
        k: list[list[float]] = []  # the lower half, row by row: all the solver reads
        start = 0
        for i in range(n):
            k.append([*values[start : start + i], 1.0 + noise])
            start += i
        self.chol = _cholesky(k)
        self.alpha: list[float] = []
        self.log_likelihood = -math.inf
        if self.chol is not None:
            z = _solve_lower(self.chol, targets)
            self.alpha = _solve_upper_transposed(self.chol, z)
            self.log_likelihood = -0.5 * sum(map(mul, z, z)) - sum(
                math.log(self.chol[i][i]) for i in range(n)
            )
        self._columns = [list(c) for c in zip(*self.points, strict=True)] if n else []
        self._squares = [s * s for s in self.inverse_scales]

    @property
    def ok(self) -> bool:
        return self.chol is not None

    def _kernels(self, x: Sequence[float], columns: list[list[float]]) -> list[float]:
        """The kernel between ``x`` and every point of ``columns`` (the points axis by axis),
        each summed over the axes in order."""
        total: list[float] = [0.0] * (len(columns[0]) if columns else 0)
        for axis, (column, square) in enumerate(zip(columns, self._squares, strict=True)):
            gaps = _squared_gaps_to(x[axis], column, axis in self.categorical)
            total = list(map(add, total, map(mul, gaps, repeat(square))))
        return list(map(_matern, total))

    def kernel(self, a: Sequence[float], b: Sequence[float]) -> float:
        return self._kernels(a, [[v] for v in b])[0]

    def predict(self, x: Sequence[float]) -> tuple[float, float]:
        """Posterior mean and standard deviation of the (noise-free) function at ``x``."""
        assert self.chol is not None
        k = self._kernels(x, self._columns)
        mean = sum(map(mul, k, self.alpha))
        v = _solve_lower(self.chol, k)
        return mean, math.sqrt(max(1.0 - sum(map(mul, v, v)), 1e-12))


def fit(
    points: Sequence[Sequence[float]],
    targets: Sequence[float],
    categorical: frozenset[int] = frozenset(),
) -> GP | None:
    """The model of highest marginal likelihood found (see the module docstring); None when no
    kernel matrix could be factorised."""
    dims = len(points[0])
    gaps = AxisGaps(points, categorical)  # the same for every model tried below
    best: GP | None = None
    for noise in NOISES:
        model = GP(points, targets, [1.0 / LENGTH_SCALE] * dims, noise, categorical, gaps)
        if model.ok and (best is None or model.log_likelihood > best.log_likelihood):
            best = model
    if best is None:
        return None
    for _ in range(PASSES):
        for d in range(dims):
            for factor in (2.0, 0.5):
                inverse = list(best.inverse_scales)
                inverse[d] = min(
                    max(inverse[d] * factor, 1.0 / MAX_LENGTH_SCALE), 1.0 / MIN_LENGTH_SCALE
                )
                model = GP(points, targets, inverse, best.noise, categorical, gaps)
                if model.ok and model.log_likelihood > best.log_likelihood:
                    best = model
    return best


def _cholesky(a: list[list[float]]) -> list[list[float]] | None:
    """The lower factor of ``a`` (its lower half, row ``i`` of length ``i + 1``), rows as long as
    ``a``'s; None when ``a`` is not positive definite."""
    low: list[list[float]] = []
    for i, a_row in enumerate(a):
        row: list[float] = []
        for j in range(i):
            other = low[j]
            row.append((a_row[j] - sum(map(mul, row, other))) / other[j])
        s = a_row[i] - sum(map(mul, row, row))
        if s <= 1e-12:
            return None
        row.append(math.sqrt(s))
        low.append(row)
    return low


def _solve_lower(low: list[list[float]], b: Sequence[float]) -> list[float]:
    x: list[float] = []
    for i, row in enumerate(low):
        x.append((b[i] - sum(map(mul, row, x))) / row[i])
    return x


def _solve_upper_transposed(low: list[list[float]], b: Sequence[float]) -> list[float]:
    n = len(b)
    x = [0.0] * n
    for i in range(n - 1, -1, -1):
        s = b[i]
        for k in range(i + 1, n):
            s -= low[k][i] * x[k]
        x[i] = s / low[i][i]
    return x
