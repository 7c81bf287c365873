"""The ``tpe`` sampler's Gaussian-process refinement: the model, and the sampler that uses it."""

import json
import math
import random
from typing import Any

import pytest

from det.master.searcher import Searcher, new_searcher, tpe
from det.master.searcher.gp import GP, fit
from det.master.searcher.simulate import simulate


def test_gp_interpolates_and_prefers_the_right_noise() -> None:
    """Noise-free samples of a smooth 2-D function: the fitted model picks the smallest noise
    level, reproduces the samples, and predicts held-out points far better than their mean (a
    broken kernel, solve or likelihood fails one of the three)."""

    def f(x: list[float]) -> float:
        return math.sin(3 * x[0]) + (x[1] - 0.4) ** 2

    rng = random.Random(1)
    points = [[rng.random(), rng.random()] for _ in range(30)]
    model = fit(points, [f(p) for p in points])
    assert model is not None and model.noise == 1e-3
    for p in points[:5]:
        assert model.predict(p)[0] == pytest.approx(f(p), abs=0.05)
    held = [[rng.random(), rng.random()] for _ in range(30)]
    mean = sum(f(p) for p in points) / len(points)
    model_error = sum((model.predict(p)[0] - f(p)) ** 2 for p in held)
    mean_error = sum((mean - f(p)) ** 2 for p in held)
    assert model_error < 0.05 * mean_error, (model_error, mean_error)
    # Far from the data the model is unsure; at a sample, sure.
    assert model.predict([5.0, 5.0])[1] > 0.9 > 0.2 > model.predict(points[0])[1]


def test_gp_on_noisy_targets_chooses_a_larger_noise() -> None:
    rng = random.Random(2)
    points = [[rng.random()] for _ in range(30)]
    noisy = [p[0] + rng.gauss(0, 0.5) for p in points]
    model = fit(points, noisy)
    assert model is not None and model.noise > 1e-3


def test_gp_categorical_axis_is_a_match_or_not() -> None:
    """Index 0 and 2 of a categorical axis are as far apart as 0 and 1 (indices carry no
    order); on a numeric axis they are not."""
    gp = GP([[0.0]], [0.0], [1.0], 1e-3, categorical=frozenset({0}))
    assert gp.kernel([0.0], [1.0]) == gp.kernel([0.0], [2.0]) < gp.kernel([0.0], [0.0]) == 1.0
    numeric = GP([[0.0]], [0.0], [1.0], 1e-3)
    assert numeric.kernel([0.0], [1.0]) > numeric.kernel([0.0], [2.0])


MIXED = {
    "d": {"type": "double", "minval": -2, "maxval": 2},
    "i": {"type": "int", "minval": 1, "maxval": 50},
    "l": {"type": "log", "base": 10, "minval": -5, "maxval": -1},
    "c": {"type": "categorical", "vals": ["a", 2, {"k": [1]}, None]},
}
RANDOM = {"name": "random", "metric": "loss", "max_trials": 40, "max_concurrent_trials": 2}


def _mixed_loss(h: dict[str, Any], t: float, seed: int) -> float:
    noise = random.Random(seed).gauss(0, 0.02)
    return float(
        ((h["d"] - 1.2) / 4) ** 2
        + ((h["i"] - 40) / 49) ** 2
        + ((math.log10(h["l"]) + 4) / 4) ** 2
        + (0.0 if h["c"] == {"k": [1]} else 0.3)
        + noise
    )


def _run(seed: int, restore_at: int | None = None) -> list[dict[str, Any]]:
    """A random search with ``sampler: tpe`` on all four kinds of hyperparameter, two trials at
    a time, each reporting once; optionally snapshotted (through JSON) and restored after
    ``restore_at`` reports."""
    searcher: Searcher = new_searcher({**RANDOM, "sampler": "tpe"}, MIXED, seed)
    live = [a for a in searcher.initial_trials() if hasattr(a, "hparams")]
    created = list(live)
    reports = 0
    while live:
        if reports == restore_at:
            searcher = Searcher.restore(json.loads(json.dumps(searcher.snapshot())))
        trial = live.pop(0)
        searcher.trial_created(trial.request_id)
        searcher.validation_completed(
            trial.request_id, _mixed_loss(trial.hparams, 1, trial.seed), 1
        )
        reports += 1
        new = [a for a in searcher.trial_exited(trial.request_id) if hasattr(a, "hparams")]
        live += new
        created += new
    return [{"hparams": c.hparams, "seed": c.seed, "id": c.request_id} for c in created]


def test_refined_search_is_seeded_restorable_and_uses_the_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fits: list[bool] = []
    real_fit = tpe.gp.fit

    def counting_fit(*args: Any, **kwargs: Any) -> Any:
        model = real_fit(*args, **kwargs)
        fits.append(model is not None)
        return model

    monkeypatch.setattr(tpe.gp, "fit", counting_fit)
    baseline = _run(seed=3)
    assert len(baseline) == 40
    # The refinement ran (once 3 x 4 + 2 trials had reported) and fitted a model every time.
    start = max(tpe.GP_MIN, tpe.GP_MIN_PER_DIM * len(MIXED) + 2)
    assert len(fits) >= 40 - start - 2 and all(fits), fits
    for h in (c["hparams"] for c in baseline):
        assert isinstance(h["d"], float) and -2 <= h["d"] <= 2
        assert type(h["i"]) is int and 1 <= h["i"] <= 50
        assert 1e-5 * (1 - 1e-9) <= h["l"] <= 1e-1 * (1 + 1e-9)
        assert h["c"] in MIXED["c"]["vals"]  # type: ignore[operator]
    assert _run(seed=3) == baseline
    assert _run(seed=4) != baseline
    for restore_at in (5, 13, 20, 33):
        assert _run(seed=3, restore_at=restore_at) == baseline, restore_at


def _noisy_bowl_regret(seed: int) -> float:
    """A 4-D bowl with noise 0.05 on every report: random search with ``sampler: tpe``, 60
    trials; the true loss of the trial with the best reported loss."""
    best = [0.3, 0.7, 0.45, 0.6]
    space = {f"x{i}": {"type": "double", "minval": 0, "maxval": 1} for i in range(4)}

    def true(h: dict[str, Any]) -> float:
        return float(sum(3 * (h[f"x{i}"] - b) ** 2 for i, b in enumerate(best)))

    def curve(h: dict[str, Any], t: float, trial_seed: int) -> float:
        return true(h) + random.Random(trial_seed).gauss(0, 0.05)

    config = {**RANDOM, "max_trials": 60, "max_concurrent_trials": 1, "sampler": "tpe"}
    trials = simulate(new_searcher(config, space, seed), curve, default_length=1).trials
    chosen = min(trials, key=lambda t: curve(t.hparams, 1, t.seed))
    return true(chosen.hparams)


def test_refinement_finds_better_configurations_than_tpe_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a noisy bowl the refined sampler's chosen configuration is closer to the optimum than
    the Parzen estimator's alone, summed over five seeds (measured: 0.149 against 0.237; the
    searches are deterministic, so this fails only if the step stops helping)."""
    refined = sum(_noisy_bowl_regret(seed) for seed in range(5))
    monkeypatch.setattr(tpe, "GP_MIN", 10**9)
    alone = sum(_noisy_bowl_regret(seed) for seed in range(5))
    assert refined < 0.75 * alone, (refined, alone)
