"""A small Gaussian-process regression in pure Python, for the ``tpe`` sampler's refinement step.

Matern-5/2 kernel with one length scale per axis (categorical axes: distance 0 for the same
value, 1 otherwise, before scaling), unit signal variance (the targets are standardised) and a
noise variance. The noise and the length scales are chosen by the log marginal likelihood: the
best of a few noise levels at a common length scale, then passes of per-axis halving or doubling
that keep a change only when the likelihood improves. Every step is plain floating-point
arithmetic in a fixed order, so the same observations give the same model on every run.

Cost: one fit is ``3 + 4 d`` Cholesky factorisations of an ``n x n`` matrix (``n`` is capped by
the caller), one prediction ``O(n^2)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

_SQRT5 = math.sqrt(5.0)
NOISES = (1e-3, 0.03, 0.3)  # noise variances tried, relative to the standardised targets
LENGTH_SCALE = 0.3  # the common starting length scale on the unit cube
MIN_LENGTH_SCALE, MAX_LENGTH_SCALE = 0.02, 4.0
PASSES = 2


class GP:
    """A fitted model of ``y`` over points ``x`` (lists of unit coordinates)."""

    def __init__(
        self,
        points: Sequence[Sequence[float]],
        targets: Sequence[float],
        inverse_scales: Sequence[float],
        noise: float,
        categorical: frozenset[int] = frozenset(),
        gaps: list[list[tuple[float, ...]]] | None = None,
    ) -> None:
        self.points = [list(p) for p in points]
        self.inverse_scales = list(inverse_scales)
        self.noise = noise
        self.categorical = categorical
        n = len(self.points)
        if gaps is None:
            gaps = axis_gaps(self.points, categorical)
        k = [[0.0] * n for _ in range(n)]  # symmetric: the lower half is all the solver reads
        inverse = self.inverse_scales
        for i in range(n):
            row, gap_row = k[i], gaps[i]
            for j in range(i):
                row[j] = _matern(gap_row[j], inverse)
            row[i] = 1.0 + noise
        self.chol = _cholesky(k)
        self.alpha: list[float] = []
        self.log_likelihood = -math.inf
        if self.chol is not None:
            z = _solve_lower(self.chol, targets)
            self.alpha = _solve_upper_transposed(self.chol, z)
            self.log_likelihood = -0.5 * sum(v * v for v in z) - sum(
                math.log(self.chol[i][i]) for i in range(n)
            )

    @property
    def ok(self) -> bool:
        return self.chol is not None

    def kernel(self, a: Sequence[float], b: Sequence[float]) -> float:
        return _matern(_gap(a, b, self.categorical), self.inverse_scales)

    def predict(self, x: Sequence[float]) -> tuple[float, float]:
        """Posterior mean and standard deviation of the (noise-free) function at ``x``."""
        assert self.chol is not None
        k = [self.kernel(x, p) for p in self.points]
        mean = sum(a * b for a, b in zip(k, self.alpha, strict=True))
        v = _solve_lower(self.chol, k)
        return mean, math.sqrt(max(1.0 - sum(a * a for a in v), 1e-12))


def fit(
    points: Sequence[Sequence[float]],
    targets: Sequence[float],
    categorical: frozenset[int] = frozenset(),
) -> GP | None:
    """The model of highest marginal likelihood found (see the module docstring); None when no
    kernel matrix could be factorised."""
    dims = len(points[0])
    gaps = axis_gaps(points, categorical)  # the same for every model tried below
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


def _gap(a: Sequence[float], b: Sequence[float], categorical: frozenset[int]) -> tuple[float, ...]:
    """Per axis, what the length scale divides: the difference of the coordinates, or for a
    categorical axis 0.0 for the same value and 1.0 otherwise."""
    return tuple(
        (0.0 if int(ai) == int(bi) else 1.0) if i in categorical else ai - bi
        for i, (ai, bi) in enumerate(zip(a, b, strict=True))
    )


def axis_gaps(
    points: Sequence[Sequence[float]], categorical: frozenset[int]
) -> list[list[tuple[float, ...]]]:
    """``_gap`` of every pair ``(i, j)``, ``j < i``, as ``gaps[i][j]``: a fit tries ``3 + 4 d``
    length scales on the same points."""
    return [[_gap(points[i], points[j], categorical) for j in range(i)] for i in range(len(points))]


def _matern(gap: Sequence[float], inverse_scales: Sequence[float]) -> float:
    """Matern-5/2 of the scaled distance; the same operations in the same order for every pair
    and axis, so that a model does not depend on how it was built."""
    s = 0.0
    for g, inverse in zip(gap, inverse_scales, strict=True):
        d = g * inverse
        s += d * d
    r = math.sqrt(s)
    return (1.0 + _SQRT5 * r + 5.0 * s / 3.0) * math.exp(-_SQRT5 * r)


def _cholesky(a: list[list[float]]) -> list[list[float]] | None:
    n = len(a)
    low = [[0.0] * n for _ in range(n)]
    for i in range(n):
        row = low[i]
        for j in range(i + 1):
            other = low[j]
            s = a[i][j]
            for k in range(j):
                s -= row[k] * other[k]
            if i == j:
                if s <= 1e-12:
                    return None
                row[i] = math.sqrt(s)
            else:
                row[j] = s / other[j]
    return low


def _solve_lower(low: list[list[float]], b: Sequence[float]) -> list[float]:
    x = [0.0] * len(b)
    for i, row in enumerate(low):
        s = b[i]
        for k in range(i):
            s -= row[k] * x[k]
        x[i] = s / row[i]
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
