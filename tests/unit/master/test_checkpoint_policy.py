"""Determined's checkpoint retention policy, on hand-worked cases."""

from __future__ import annotations

from det.master.checkpoint_policy import Checkpoint, Retention, to_delete

# trial 1: validations at 10 (0.5), 20 (0.3), 30 (0.4); checkpoint at 40 without a validation.
T1 = [
    Checkpoint("a10", 1, 10, 0.5),
    Checkpoint("a20", 1, 20, 0.3),
    Checkpoint("a30", 1, 30, 0.4),
    Checkpoint("a40", 1, 40, None),
]
# trial 2: 10 (0.2), 20 (0.25)
T2 = [Checkpoint("b10", 2, 10, 0.2), Checkpoint("b20", 2, 20, 0.25)]


def test_defaults_keep_each_trials_best_and_latest() -> None:
    assert to_delete(T1 + T2, Retention()) == ["a10", "a30"]


def test_larger_is_better_flips_the_ranking() -> None:
    assert to_delete(T1 + T2, Retention(smaller_is_better=False)) == ["a20", "a30", "b10"]


def test_experiment_best_keeps_the_best_across_trials() -> None:
    policy = Retention(experiment_best=3, trial_best=0, trial_latest=0)
    # 0.2 (b10), 0.25 (b20), 0.3 (a20)
    assert to_delete(T1 + T2, policy) == ["a10", "a30", "a40"]


def test_zeros_everywhere_delete_everything() -> None:
    policy = Retention(experiment_best=0, trial_best=0, trial_latest=0)
    assert to_delete(T1 + T2, policy) == [c.uuid for c in T1 + T2]


def test_more_than_there_are_keeps_all() -> None:
    assert to_delete(T1 + T2, Retention(trial_best=5, trial_latest=5)) == []


def test_a_checkpoint_without_a_validation_is_kept_only_as_a_latest() -> None:
    policy = Retention(trial_best=10, trial_latest=0)
    assert to_delete(T1, policy) == ["a40"]


def test_ties_keep_the_later_checkpoint() -> None:
    tied = [Checkpoint("x", 1, 10, 0.1), Checkpoint("y", 1, 20, 0.1), Checkpoint("z", 1, 30, 0.9)]
    assert to_delete(tied, Retention(trial_best=1, trial_latest=0)) == ["x", "z"]
