"""single, random and grid searchers, and the facade's bookkeeping."""

from collections import deque
from typing import Any

import pytest

from det.master.searcher import (
    CreateTrial,
    ExitedReason,
    Searcher,
    Shutdown,
    action_from_dict,
    new_searcher,
)

HP = {
    "lr": {"type": "log", "minval": -4, "maxval": -1, "count": 2},
    "n": {"type": "int", "minval": 1, "maxval": 10, "count": 3},
    "act": {"type": "categorical", "vals": ["relu", "tanh"]},
    "const": 3,
}


def creates(actions: list[Any]) -> list[CreateTrial]:
    return [a for a in actions if isinstance(a, CreateTrial)]


def run_fifo(
    searcher: Searcher, reasons: dict[int, ExitedReason] | None = None
) -> tuple[list[CreateTrial], int, list[Any]]:
    """Exit trials oldest-first; returns (all creates, max alive at once, final actions)."""
    reasons = reasons or {}
    alive: deque[str] = deque()
    made: list[CreateTrial] = []
    peak = 0
    pending = searcher.initial_trials()
    last: list[Any] = []
    while True:
        for c in creates(pending):
            searcher.trial_created(c.request_id)
            alive.append(c.request_id)
            made.append(c)
        peak = max(peak, len(alive))
        if not alive:
            return made, peak, last
        rid = alive.popleft()
        index = [c.request_id for c in made].index(rid)
        if index in reasons:
            pending = searcher.trial_exited_early(rid, reasons[index])
        else:
            searcher.validation_completed(rid, 0.5, 10)
            pending = searcher.trial_exited(rid)
        last = pending


@pytest.mark.parametrize(("max_trials", "concurrent", "peak"), [(10, 3, 3), (2, 5, 2), (7, 0, 7)])
def test_random_respects_max_concurrent_trials(max_trials: int, concurrent: int, peak: int) -> None:
    searcher = new_searcher(
        {
            "name": "random",
            "metric": "loss",
            "max_trials": max_trials,
            "max_concurrent_trials": concurrent,
        },
        HP,
        seed=3,
    )
    made, seen_peak, last = run_fifo(searcher)
    assert len(made) == max_trials
    assert seen_peak == peak
    assert last == [Shutdown(failure=False)]
    assert searcher.progress() == 1.0


def test_random_replaces_invalid_hp_trials_without_counting_them() -> None:
    searcher = new_searcher(
        {"name": "random", "metric": "loss", "max_trials": 4, "max_concurrent_trials": 2}, HP, 3
    )
    made, _, last = run_fifo(
        searcher, {0: ExitedReason.INVALID_HP, 2: ExitedReason.INVALID_HP, 3: ExitedReason.ERRORED}
    )
    assert len(made) == 6  # 4 counted + 2 replacements
    assert last == [Shutdown(failure=False)]
    assert searcher.exited[made[0].request_id] == "INVALID_HP"


def test_single_creates_one_trial_and_reports_legacy_length() -> None:
    searcher = new_searcher(
        {"name": "single", "metric": "loss", "max_length": {"batches": 100}}, HP, 0
    )
    made, peak, last = run_fifo(searcher)
    assert (len(made), peak) == (1, 1)
    assert searcher.trial_target_length(made[0].request_id) == 100.0
    assert last == [Shutdown()]


def test_random_without_max_length_has_no_target_length() -> None:
    searcher = new_searcher({"name": "random", "metric": "loss", "max_trials": 2}, HP, 0)
    rid = searcher.initial_trials()[0].request_id
    assert searcher.trial_target_length(rid) is None


def test_random_progress_is_the_fraction_of_finished_trials() -> None:
    searcher = new_searcher(
        {"name": "random", "metric": "loss", "max_trials": 4, "max_concurrent_trials": 4}, HP, 0
    )
    ids = [c.request_id for c in creates(searcher.initial_trials())]
    searcher.trial_exited(ids[0])
    searcher.trial_exited_early(ids[1], ExitedReason.USER_CANCELED)
    assert searcher.progress() == 0.5


@pytest.mark.parametrize("concurrent", [0, 2])
def test_grid_creates_each_point_once_within_concurrency(concurrent: int) -> None:
    searcher = new_searcher(
        {"name": "grid", "metric": "loss", "max_concurrent_trials": concurrent}, HP, 9
    )
    made, peak, last = run_fifo(searcher, {1: ExitedReason.INVALID_HP})
    assert len(made) == 2 * 3 * 2  # lr count 2, n count 3, act 2 values; INVALID_HP not retried
    assert peak == (12 if concurrent == 0 else 2)
    assert {(c.hparams["lr"], c.hparams["n"], c.hparams["act"]) for c in made} == {
        (lr, n, act) for lr in (1e-4, 1e-1) for n in (1, 6, 10) for act in ("relu", "tanh")
    }
    assert all(c.hparams["const"] == 3 for c in made)
    assert last == [Shutdown(failure=False)]


def test_grid_without_counts_is_rejected_at_creation() -> None:
    with pytest.raises(ValueError, match=r"hyperparameters\.x\.count"):
        new_searcher(
            {"name": "grid", "metric": "loss"},
            {"x": {"type": "double", "minval": 0, "maxval": 1}},
            0,
        )


def test_initial_trials_only_once() -> None:
    searcher = new_searcher({"name": "random", "metric": "loss", "max_trials": 1}, HP, 0)
    searcher.initial_trials()
    with pytest.raises(RuntimeError):
        searcher.initial_trials()


def test_same_config_and_seed_give_the_same_trials() -> None:
    cfg = {"name": "random", "metric": "loss", "max_trials": 5, "max_concurrent_trials": 2}
    runs = [run_fifo(new_searcher(cfg, HP, seed))[0] for seed in (42, 42, 43)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    assert len({c.request_id for c in runs[0]}) == 5
    assert len({c.seed for c in runs[0]}) == 5


def test_actions_round_trip_through_dicts() -> None:
    searcher = new_searcher({"name": "random", "metric": "loss", "max_trials": 1}, HP, 0)
    (create,) = searcher.initial_trials()
    assert action_from_dict(create.to_dict()) == create
    assert action_from_dict(Shutdown(failure=True).to_dict()) == Shutdown(failure=True)
