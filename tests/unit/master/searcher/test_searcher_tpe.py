"""``sampler: tpe``: seeded and deterministic, survives snapshot/restore, learns, stays opt-in."""

import json
import math
from collections import deque
from typing import Any

import pytest

from det.master.searcher import (
    CreateTrial,
    ExitedReason,
    Searcher,
    Shutdown,
    StopTrial,
    new_searcher,
)
from det.master.searcher.simulate import SyntheticCurve, simulate

HP = {
    "x": {"type": "double", "minval": 0, "maxval": 1},
    "opt": {"lr": {"type": "log", "minval": -4, "maxval": -1}, "name": "sgd"},
    "width": {"type": "int", "minval": 8, "maxval": 64},
    "act": {"type": "categorical", "vals": ["relu", "tanh", "gelu"]},
}
ASHA = {"metric": "loss", "time_metric": "batches", "max_time": 27, "divisor": 3}
CONFIGS = {
    "random": {"name": "random", "metric": "loss", "max_trials": 30, "max_concurrent_trials": 3},
    "async_halving": {
        **ASHA,
        "name": "async_halving",
        "num_rungs": 4,
        "max_trials": 40,
        "max_concurrent_trials": 4,
    },
    "adaptive_asha": {
        **ASHA,
        "name": "adaptive_asha",
        "mode": "standard",
        "max_trials": 50,
        "max_concurrent_trials": 5,
    },
}


def tpe(name: str) -> dict[str, Any]:
    return {**CONFIGS[name], "sampler": "tpe"}


def drive(config: dict[str, Any], seed: int, restore_at: int | None = None) -> list[Any]:
    """Round-robin over live trials: report at 1, 3, 9, 27 batches (a random search's trials
    too), then exit. Trials with x > 0.9 fail INVALID_HP, x < 0.03 fail ERRORED at once."""
    searcher: Searcher = new_searcher(config, HP, seed)
    curve = SyntheticCurve(HP, seed=3, noise=0.02)
    log: list[Any] = []
    queue: deque[tuple[CreateTrial, int]] = deque()
    stopped: set[str] = set()

    def apply(actions: list[Any]) -> None:
        log.append([a.to_dict() for a in actions])
        for a in actions:
            if isinstance(a, CreateTrial):
                searcher.trial_created(a.request_id)
                queue.append((a, 0))
            elif isinstance(a, StopTrial):
                stopped.add(a.request_id)

    apply(searcher.initial_trials())
    step = 0
    while queue:
        if step == restore_at:
            dumped = json.dumps(searcher.snapshot(), allow_nan=False)
            searcher = Searcher.restore(json.loads(dumped))
        step += 1
        create, k = queue.popleft()
        rid, x = create.request_id, create.hparams["x"]
        times = [1, 3, 9, 27]
        if k == 0 and x > 0.9:
            apply(searcher.trial_exited_early(rid, ExitedReason.INVALID_HP))
        elif k == 0 and x < 0.03:
            apply(searcher.trial_exited_early(rid, ExitedReason.ERRORED))
        elif rid in stopped or k == len(times):
            apply(searcher.trial_exited(rid))
        else:
            loss = curve(create.hparams, times[k], create.seed)
            apply(searcher.validation_completed(rid, loss, times[k]))
            queue.append((create, k + 1))
    return log


def hparams_of(log: list[Any]) -> list[dict[str, Any]]:
    return [a["hparams"] for entry in log for a in entry if a["type"] == "create"]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_tpe_is_seeded_and_deterministic(name: str) -> None:
    first = drive(tpe(name), seed=4)
    assert first[-1][-1] == Shutdown().to_dict()
    assert drive(tpe(name), seed=4) == first
    assert drive(tpe(name), seed=5) != first
    # Past the uniform start-up, the model proposes other points than uniform sampling would.
    assert hparams_of(first) != hparams_of(drive(CONFIGS[name], seed=4))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_tpe_restored_search_makes_identical_decisions(name: str) -> None:
    baseline = drive(tpe(name), seed=6)
    for restore_at in (3, 25, 70, 140):
        assert drive(tpe(name), seed=6, restore_at=restore_at) == baseline, restore_at


def test_snapshot_carries_the_observations() -> None:
    searcher = new_searcher(tpe("async_halving"), HP, 1)
    first = searcher.initial_trials()[0]
    searcher.validation_completed(first.request_id, 0.5, 1)
    searcher.validation_completed(first.request_id, 0.4, 3)
    snap = json.loads(json.dumps(searcher.snapshot(), allow_nan=False))
    ((rid, units, level, loss), *_) = snap["sampler"]["trials"]
    assert (rid, level, loss) == (first.request_id, 2, 0.4)  # rung times 1, 3, 9, 27
    assert len(units) == 4 and all(0 <= u <= 2 for u in units)
    assert Searcher.restore(snap).ctx.sampler.trials == searcher.ctx.sampler.trials  # type: ignore[union-attr]


def test_unset_sampler_is_uniform_sampling_and_leaves_snapshots_as_before() -> None:
    """Determined configs (no ``sampler``) search exactly as ``sampler: random`` does."""
    for name in CONFIGS:
        plain = drive(CONFIGS[name], seed=2)
        assert drive({**CONFIGS[name], "sampler": "random"}, seed=2) == plain
        assert "sampler" not in new_searcher(CONFIGS[name], HP, 2).snapshot()


def test_bad_sampler_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"searcher\.sampler"):
        new_searcher({**CONFIGS["random"], "sampler": "bayes"}, HP, 1)


def test_tpe_concentrates_near_the_optimum() -> None:
    """On a 2-D bowl, the second half of a TPE random search lands much closer to the optimum
    than uniform sampling's; this fails if the model is ignored or inverted."""
    space = {"a": {"type": "double", "minval": 0, "maxval": 1},
             "b": {"type": "double", "minval": 0, "maxval": 1}}  # fmt: skip

    def curve(h: dict[str, Any], t: float, seed: int) -> float:
        return float((h["a"] - 0.3) ** 2 + (h["b"] - 0.7) ** 2)

    def late_distance(sampler: str, seed: int) -> float:
        config = {"name": "random", "metric": "loss", "max_trials": 60,
                  "max_concurrent_trials": 1, "sampler": sampler}  # fmt: skip
        trials = simulate(new_searcher(config, space, seed), curve, default_length=1).trials
        late = trials[30:]
        return sum(math.hypot(t.hparams["a"] - 0.3, t.hparams["b"] - 0.7) for t in late) / 30

    for seed in range(3):
        assert late_distance("tpe", seed) < 0.5 * late_distance("random", seed)


MIXED = {
    "d": {"type": "double", "minval": -2, "maxval": 2},
    "i": {"type": "int", "minval": 1, "maxval": 50},
    "l": {"type": "log", "base": 10, "minval": -5, "maxval": -1},
    "c": {"type": "categorical", "vals": ["a", 2, {"k": [1]}, None]},
    "net": {"const": 7, "act": {"type": "categorical", "vals": ["relu", "tanh"]}},
}
GOOD = {"d": 1.2, "i": 40, "log_l": -4.0, "c": {"k": [1]}}


def _mixed_loss(h: dict[str, Any], t: float, seed: int) -> float:
    return float(
        ((h["d"] - GOOD["d"]) / 4) ** 2
        + ((h["i"] - GOOD["i"]) / 49) ** 2
        + ((math.log10(h["l"]) - GOOD["log_l"]) / 4) ** 2
        + (0.0 if h["c"] == GOOD["c"] else 0.3)
    )


def _mixed_late(sampler: str, seed: int) -> list[dict[str, Any]]:
    config = {"name": "random", "metric": "loss", "max_trials": 80,
              "max_concurrent_trials": 1, "sampler": sampler}  # fmt: skip
    trials = simulate(new_searcher(config, MIXED, seed), _mixed_loss, default_length=1).trials
    assert len(trials) == 80
    for t in trials:
        h = t.hparams
        # Every proposal, uniform or from the model, is a value of its hyperparameter.
        assert isinstance(h["d"], float) and -2 <= h["d"] <= 2
        assert type(h["i"]) is int and 1 <= h["i"] <= 50
        assert isinstance(h["l"], float) and 1e-5 * (1 - 1e-9) <= h["l"] <= 1e-1 * (1 + 1e-9)
        assert h["c"] in MIXED["c"]["vals"]  # type: ignore[operator]
        assert h["net"]["const"] == 7 and h["net"]["act"] in ("relu", "tanh")
    return [t.hparams for t in trials[40:]]


def test_tpe_learns_double_int_log_and_categorical_dimensions() -> None:
    """Past the start-up, each kind of dimension lands nearer its optimum than uniform sampling
    does, summed over six seeds: fails if a kind is decoded or modelled wrongly (ignored, it
    would be about as far as uniform). Per seed the categorical can stay on a wrong value: a
    seed whose start-up tried the best value once, with poor other values, never returns to it
    (1 seed of 10 measured), hence the sum."""
    distance = {
        "d": lambda h: abs(h["d"] - GOOD["d"]) / 4,
        "i": lambda h: abs(h["i"] - GOOD["i"]) / 49,
        "l": lambda h: abs(math.log10(h["l"]) - GOOD["log_l"]) / 4,
        "c": lambda h: float(h["c"] != GOOD["c"]),
    }
    tpe_sum = dict.fromkeys(distance, 0.0)
    uniform_sum = dict.fromkeys(distance, 0.0)
    for seed in range(6):
        tpe_late, uniform_late = _mixed_late("tpe", seed), _mixed_late("random", seed)
        for name, dist in distance.items():
            tpe_sum[name] += sum(dist(h) for h in tpe_late)
            uniform_sum[name] += sum(dist(h) for h in uniform_late)
    for name in distance:
        assert tpe_sum[name] < 0.7 * uniform_sum[name], (name, tpe_sum, uniform_sum)


def test_kernel_widths_follow_the_gaps_between_trials() -> None:
    """Hand-worked: on one axis, points 0.1, 0.5, 0.6 (in that list order, floor 1 / (3 + 2)):
    0.1 takes its inner gap 0.4, 0.5 the larger of 0.4 and 0.1, 0.6 its inner gap 0.1, raised to
    the floor 0.2. A categorical axis has no width (1.0). Fails with a fixed width per count."""
    from det.master.searcher.hparams import parse_hyperparameters
    from det.master.searcher.tpe import _dims, _widths

    double = {"type": "double", "minval": 0, "maxval": 1}
    space = parse_hyperparameters({"a": double, "c": {"type": "categorical", "vals": [1, 2]}})
    widths = _widths(_dims(space), [[0.1, 0.0], [0.5, 1.0], [0.6, 0.0]])
    assert [w[0] for w in widths] == pytest.approx([0.4, 0.4, 0.2])
    assert [w[1] for w in widths] == [1.0, 1.0, 1.0]
    # Clustered points: the kernels narrow to the floor, 1 / min(100, n + 2).
    cluster = [[0.5 + 0.001 * k, 0.0] for k in range(30)]
    assert max(w[0] for w in _widths(_dims(space), cluster)) == pytest.approx(1 / 32)


def test_integers_get_equal_cells_ends_included() -> None:
    """int 1..4 on the unit interval: four cells of 0.25 (the ends used to get half cells, so a
    uniform draw on the model's axis proposed 1 and 4 half as often as 2 and 3)."""
    from det.master.searcher.hparams import parse_hyperparameters
    from det.master.searcher.tpe import _decode, _dims, _encode

    (dim,) = _dims(parse_hyperparameters({"i": {"type": "int", "minval": 1, "maxval": 4}}))
    assert [_encode(dim, v) for v in (1, 2, 3, 4)] == pytest.approx([0.125, 0.375, 0.625, 0.875])
    counts = {v: 0 for v in (1, 2, 3, 4)}
    for k in range(1000):
        counts[_decode(dim, (k + 0.5) / 1000)] += 1
    assert counts == {1: 250, 2: 250, 3: 250, 4: 250}
    assert _decode(dim, 0.0) == 1 and _decode(dim, 1.0) == 4


def test_tpe_refines_within_the_best_region() -> None:
    """On a narrow 4-D bowl, the last 40 of 120 random-search proposals land within 0.1 of the
    optimum far more often than uniform sampling would (its chance: under 0.1%): the kernels
    narrow as the good trials cluster. A fixed Scott's-rule width (the sampler before) kept them
    about 0.15 wide per axis, and its late proposals rarely came that close."""
    space = {f"x{i}": {"type": "double", "minval": 0, "maxval": 1} for i in range(4)}
    best = [0.3, 0.7, 0.45, 0.6]

    def curve(h: dict[str, Any], t: float, seed: int) -> float:
        return float(sum((h[f"x{i}"] - b) ** 2 for i, b in enumerate(best)))

    close = 0
    for seed in range(3):
        config = {"name": "random", "metric": "loss", "max_trials": 120,
                  "max_concurrent_trials": 1, "sampler": "tpe"}  # fmt: skip
        trials = simulate(new_searcher(config, space, seed), curve, default_length=1).trials
        close += sum(
            math.dist([t.hparams[f"x{i}"] for i in range(4)], best) < 0.1 for t in trials[80:]
        )
    assert close >= 40, close  # of 120
