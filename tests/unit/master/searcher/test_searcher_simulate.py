"""The offline simulator and preview."""

from collections import Counter
from typing import Any

import pytest

from det.master.searcher import ExitedReason, new_searcher
from det.master.searcher.simulate import SyntheticCurve, preview, simulate

HP = {
    "x": {"type": "double", "minval": 0, "maxval": 1},
    "lr": {"type": "log", "minval": -4, "maxval": -1},
}
ASHA = {
    "name": "async_halving",
    "metric": "loss",
    "time_metric": "batches",
    "max_time": 8,
    "divisor": 2,
    "num_rungs": 4,
    "max_trials": 16,
    "max_concurrent_trials": 4,
}


def by_x(hparams: dict[str, Any], t: float, seed: int) -> float:
    """Loss ordered by x at every length: a perfectly predictive learning curve."""
    return float(hparams["x"]) + 1.0 / t


def test_asha_simulation_accounts_every_unit_of_budget() -> None:
    result = simulate(new_searcher(ASHA, HP, 4), SyntheticCurve(HP, seed=1))
    assert result.finished
    assert len(result.trials) == 16
    rung_times = [1.0, 2.0, 4.0, 8.0]
    for trial in result.trials:
        assert trial.outcome == "stopped"
        assert trial.stopped_at_rung is not None
        assert trial.trained == rung_times[trial.stopped_at_rung]
    assert result.budget == sum(t.trained for t in result.trials)
    assert result.best_metric == min(t.best_metric for t in result.trials)
    assert result.trajectory[-1][1] == result.best_metric
    budgets = [b for b, _ in result.trajectory]
    assert budgets == sorted(budgets)


def test_with_a_predictive_curve_the_best_trial_survives_to_the_top_rung() -> None:
    result = simulate(new_searcher(ASHA, HP, 4), by_x)
    best = min(result.trials, key=lambda t: t.hparams["x"])
    assert best.stopped_at_rung == 3
    assert result.best_request_id == best.request_id
    # Early stopping cuts most trials at the lowest rung.
    counts = Counter(t.stopped_at_rung for t in result.trials)
    assert counts[0] > counts[3]
    assert result.budget < 16 * 8


def test_random_simulation_needs_a_length_and_trains_each_trial_fully() -> None:
    searcher = new_searcher(
        {"name": "random", "metric": "loss", "max_trials": 5, "max_concurrent_trials": 2}, HP, 0
    )
    with pytest.raises(ValueError, match="default_length"):
        simulate(searcher, by_x)
    searcher = new_searcher(
        {"name": "random", "metric": "loss", "max_trials": 5, "max_concurrent_trials": 2}, HP, 0
    )
    result = simulate(searcher, by_x, default_length=10, validate_every=5)
    assert [t.trained for t in result.trials] == [10.0] * 5
    assert result.budget == 50.0
    assert result.budget_to_reach(result.best_metric) == result.trajectory[-1][0]
    assert result.budget_to_reach(-1.0) is None


def test_invalid_hp_trials_are_replaced_in_simulation() -> None:
    searcher = new_searcher({**ASHA, "max_trials": 6}, HP, 2)
    result = simulate(
        searcher, by_x, exit_fn=lambda h: ExitedReason.INVALID_HP if h["x"] > 0.7 else None
    )
    invalid = [t for t in result.trials if t.outcome == "INVALID_HP"]
    assert invalid and all(t.trained == 0 for t in invalid)
    assert len(result.trials) - len(invalid) == 6


def test_max_budget_cuts_the_run_short() -> None:
    result = simulate(new_searcher(ASHA, HP, 4), by_x, max_budget=10)
    assert not result.finished
    assert 10 <= result.budget < 16


def test_preview_of_asha_lists_lengths_and_budget() -> None:
    cfg = {**ASHA, "num_rungs": 3, "max_time": 4, "max_trials": 8}
    result = preview(cfg, HP, seed=3)
    assert len(result.trials) == 8
    assert result.time_metric == "batches"
    assert sum(c for _, c in result.length_counts()) == 8
    assert {n for n, _ in result.length_counts()} <= {1.0, 2.0, 4.0}
    assert 4.0 in {n for n, _ in result.length_counts()}  # the first arrival at each rung continues
    assert result.total_length == sum(t.length or 0 for t in result.trials)
    as_dict = result.to_dict()
    assert as_dict["numTrials"] == 8 and as_dict["searcher"] == "async_halving"
    assert preview(cfg, HP, seed=3) == result


def test_preview_shows_the_sampler_and_how_many_trials_reach_each_rung() -> None:
    """async_halving, rungs at 1, 2, 4 batches: every trial is ranked at rung 1, and a trial
    reaches a rung iff it trained at least that long (the lengths the preview also counts)."""
    cfg = {**ASHA, "num_rungs": 3, "max_time": 4, "max_trials": 8, "sampler": "tpe"}
    result = preview(cfg, HP, seed=3)
    assert result.sampler == "tpe"
    ((trials, rungs),) = [(b.trials, b.rungs) for b in result.brackets]
    assert trials == 8 and [r.length for r in rungs] == [1.0, 2.0, 4.0]
    lengths = [t.length or 0.0 for t in result.trials]
    assert [r.trials for r in rungs] == [sum(n >= r.length for n in lengths) for r in rungs]
    assert rungs[0].trials == 8 and rungs[-1].trials < 8
    assert result.to_dict()["brackets"][0]["rungs"][0] == {"length": 1.0, "trials": 8}
    assert preview({**cfg, "sampler": "random"}, HP, seed=3).sampler == "random"
    # adaptive_asha: one bracket per rung count of its mode, most rungs first; random: none.
    adaptive = {**cfg, "name": "adaptive_asha", "mode": "conservative", "max_trials": 20}
    del adaptive["num_rungs"]
    brackets = preview(adaptive, HP, seed=3).brackets
    assert [[r.length for r in b.rungs] for b in brackets] == [[1.0, 2.0, 4.0], [2.0, 4.0], [4.0]]
    assert sum(b.trials for b in brackets) == 20
    random_cfg = {"name": "random", "metric": "loss", "max_trials": 3, "max_length": 5}
    assert preview(random_cfg, HP, seed=3).brackets == ()


def test_preview_of_random_without_length_reports_unknown_lengths() -> None:
    result = preview({"name": "random", "metric": "loss", "max_trials": 3}, HP, seed=0)
    assert [t.length for t in result.trials] == [None, None, None]
    assert result.total_length is None
    assert result.to_dict()["lengthCounts"] == [{"length": None, "trials": 3}]


def test_preview_names_bad_fields() -> None:
    with pytest.raises(ValueError, match=r"searcher\.max_trials"):
        preview({"name": "random", "metric": "loss"}, HP, seed=0)
