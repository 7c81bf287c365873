"""Search progress counts what unfinished trials (running or paused) have trained: the fraction
each last reported, beside the trials that exited (det.master.searcher.basic)."""

from __future__ import annotations

import pytest

from det.master.searcher import CreateTrial, ExitedReason, Searcher, new_searcher

HP = {"lr": {"type": "categorical", "vals": [0.1, 0.01, 0.001, 0.0001]}}


def _random(max_trials: int, concurrent: int) -> Searcher:
    return new_searcher(
        {
            "name": "random",
            "metric": "loss",
            "max_trials": max_trials,
            "max_concurrent_trials": concurrent,
        },
        HP,
        0,
    )


def _ids(searcher: Searcher) -> list[str]:
    return [a.request_id for a in searcher.initial_trials() if isinstance(a, CreateTrial)]


# (searcher, exits by trial index, reported fractions by trial index, expected progress)
CASES = [
    # The paused single trial: 12,800 of 200,000 batches.
    ("single", {}, {0: 12_800 / 200_000}, 0.064),
    ("single", {}, {}, 0.0),
    # Four trials at once, one done, two half way, one not reported yet.
    ("random4", {0: "done"}, {1: 0.5, 2: 0.5}, (1 + 0.5 + 0.5) / 4),
    # An exited trial's last report is not counted twice.
    ("random4", {0: "done"}, {0: 0.7, 1: 0.25}, (1 + 0.25) / 4),
    # Errored and canceled trials count as done, as their budget is spent.
    ("random4", {0: ExitedReason.ERRORED, 1: ExitedReason.USER_CANCELED}, {2: 0.5}, 2.5 / 4),
    # Two of ten at once, both half way: 10% of the search, not Determined's 50%.
    ("random10of2", {}, {0: 0.5, 1: 0.5}, 0.1),
    # Out-of-range reports are clamped.
    ("random4", {}, {0: 1.5, 1: -1.0}, 0.25),
    # Grid: four points.
    ("grid", {0: "done"}, {1: 0.5}, 1.5 / 4),
    ("grid", {0: ExitedReason.INVALID_HP}, {1: 1.0}, 2 / 4),
]


def _build(kind: str) -> Searcher:
    if kind == "single":
        return new_searcher({"name": "single", "metric": "loss"}, HP, 0)
    if kind == "random4":
        return _random(4, 4)
    if kind == "random10of2":
        return _random(10, 2)
    return new_searcher({"name": "grid", "metric": "loss"}, HP, 0)


@pytest.mark.parametrize(("kind", "exits", "reported", "expected"), CASES)
def test_progress_counts_unfinished_trials_training(
    kind: str,
    exits: dict[int, object],
    reported: dict[int, float],
    expected: float,
) -> None:
    searcher = _build(kind)
    ids = _ids(searcher)
    for i, how in exits.items():
        if how == "done":
            searcher.trial_exited(ids[i])
        else:
            assert isinstance(how, ExitedReason)
            searcher.trial_exited_early(ids[i], how)
    assert searcher.progress({ids[i]: f for i, f in reported.items()}) == pytest.approx(expected)


def test_reports_of_unknown_trials_and_after_shutdown_change_nothing() -> None:
    searcher = _random(2, 2)
    ids = _ids(searcher)
    assert searcher.progress({"not-a-trial": 1.0, ids[0]: float("nan")}) == 0.0
    for rid in ids:
        searcher.trial_exited(rid)
    assert searcher.progress({ids[0]: 0.1}) == 1.0


def test_progress_survives_a_snapshot() -> None:
    searcher = _random(4, 4)
    ids = _ids(searcher)
    searcher.trial_exited(ids[0])
    restored = Searcher.restore(searcher.snapshot())
    assert restored.progress({ids[1]: 0.5}) == searcher.progress({ids[1]: 0.5}) == 0.375
