"""async_halving: hand-worked stopping decisions, replacements, early exits."""

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

HP = {"x": {"type": "double", "minval": 0, "maxval": 1}}


def asha(**overrides: Any) -> Searcher:
    cfg = {
        "name": "async_halving",
        "metric": "loss",
        "time_metric": "batches",
        "max_time": 4,
        "divisor": 2,
        "num_rungs": 3,
        "max_trials": 4,
        "max_concurrent_trials": 4,
        **overrides,
    }
    return new_searcher(cfg, HP, seed=11)


def start(searcher: Searcher) -> list[str]:
    ids = [a.request_id for a in searcher.initial_trials() if isinstance(a, CreateTrial)]
    for rid in ids:
        searcher.trial_created(rid)
    return ids


def stops(actions: list[Any]) -> list[str]:
    return [a.request_id for a in actions if isinstance(a, StopTrial)]


def test_rung_times_follow_divisor_powers() -> None:
    assert asha().method.rung_times == [1.0, 2.0, 4.0]
    assert asha(max_time=81, divisor=3, num_rungs=4).method.rung_times == [3.0, 9.0, 27.0, 81.0]


# Divisor 2, rungs at 1, 2, 4 batches. Each row: (trial index, time, metric, stopped?).
# Rung 0 fills as A .5, B .4, C .6 (3 recorded, keep max(3//2, 1) = 1: C ranks 3rd -> stop),
# D .45 (4 recorded, keep 2: D ranks 2nd -> continue). Rung 1: A .3 (alone), B .35 (keep 1:
# 2nd -> stop), D .2 (keep 1: 1st -> continue). Rung 2 is the top: reaching it stops the trial.
DIVISOR_2 = [
    (0, 1, 0.5, False),
    (1, 1, 0.4, False),
    (2, 1, 0.6, True),
    (3, 1, 0.45, False),
    (0, 2, 0.3, False),
    (1, 2, 0.35, True),
    (3, 2, 0.2, False),
    (0, 4, 0.1, True),
    (3, 4, 0.15, True),
]

# Divisor 3, rungs at 3, 9. Rung 0 receives .5 .4 .6 .3 .7 .35: keep = max(n // 3, 1) gives
# 1, 1, 1, 1, 1, 2 and the ranks are 1, 1, 3, 1, 5, 2: trials 2 and 4 are stopped.
DIVISOR_3 = [
    (0, 3, 0.5, False),
    (1, 3, 0.4, False),
    (2, 3, 0.6, True),
    (3, 3, 0.3, False),
    (4, 3, 0.7, True),
    (5, 3, 0.35, False),
]


@pytest.mark.parametrize(
    ("overrides", "script"),
    [
        ({}, DIVISOR_2),
        (
            {
                "divisor": 3,
                "num_rungs": 2,
                "max_time": 9,
                "max_trials": 6,
                "max_concurrent_trials": 6,
            },
            DIVISOR_3,
        ),
    ],
    ids=["divisor-2", "divisor-3"],
)
@pytest.mark.parametrize("smaller_is_better", [True, False])
def test_stops_trials_outside_the_top_fraction_of_each_rung(
    overrides: dict[str, Any], script: list[tuple[int, float, float, bool]], smaller_is_better: bool
) -> None:
    searcher = asha(smaller_is_better=smaller_is_better, **overrides)
    ids = start(searcher)
    sign = 1 if smaller_is_better else -1
    for index, time, metric, stopped in script:
        actions = searcher.validation_completed(ids[index], sign * metric, time)
        assert stops(actions) == ([ids[index]] if stopped else []), (index, time)


def test_one_validation_can_clear_several_rungs() -> None:
    searcher = asha(max_trials=6, max_concurrent_trials=6)
    a, b, c, d, e, _ = start(searcher)
    assert stops(searcher.validation_completed(a, 0.3, 4)) == [a]  # recorded in all 3 rungs
    assert searcher.method.ids == [[a], [a], [a]]
    assert stops(searcher.validation_completed(b, 0.6, 1)) == [b]
    assert stops(searcher.validation_completed(c, 0.7, 1)) == [c]
    # d at 2 batches: rung 0 holds .3 .4 .6 .7 (keep 2, d 2nd: continue); rung 1 holds .3 .4
    # (keep 1, d 2nd): stopped at rung 1.
    assert stops(searcher.validation_completed(d, 0.4, 2)) == [d]
    assert searcher.method.trial_rungs[d] == 1
    # e is best at rungs 0 and 1 and now waits for rung 2.
    assert stops(searcher.validation_completed(e, 0.2, 3)) == []
    assert searcher.method.trial_rungs[e] == 2
    assert stops(searcher.validation_completed(e, 0.9, 3)) == []  # nothing new reached: no-op


def test_ties_rank_the_newcomer_first() -> None:
    searcher = asha()
    a, b, *_ = start(searcher)
    searcher.validation_completed(a, 0.5, 1)
    assert stops(searcher.validation_completed(b, 0.5, 1)) == []
    assert searcher.method.ids[0] == [b, a]


def test_below_first_rung_nothing_is_recorded() -> None:
    searcher = asha()
    a, *_ = start(searcher)
    assert searcher.validation_completed(a, 0.5, 0.5) == []
    assert searcher.method.losses == [[], [], []]


def test_default_concurrency_is_divisor_power_capped_by_max_trials() -> None:
    assert len(start(asha(max_concurrent_trials=0, max_trials=10))) == 4  # 2 ** (3 - 1)
    assert len(start(asha(max_concurrent_trials=0, max_trials=3))) == 3
    assert len(start(asha(max_concurrent_trials=2, max_trials=10))) == 2


def test_replacement_is_created_when_a_stopped_trial_exits_not_before() -> None:
    searcher = asha(max_trials=3, max_concurrent_trials=2)
    a, b = start(searcher)
    searcher.validation_completed(a, 0.1, 1)
    assert stops(searcher.validation_completed(b, 0.9, 1)) == [b]
    actions = searcher.trial_exited(b)
    assert [type(x) for x in actions] == [CreateTrial]
    c = actions[0].request_id
    searcher.trial_created(c)
    # Validations of a stopped trial (reported while it checkpoints) are ignored.
    assert searcher.validation_completed(b, 0.0, 2) == []
    assert searcher.trial_exited(a) == []  # max_trials reached, c still running
    assert searcher.trial_exited(c) == [Shutdown(failure=False)]
    assert searcher.progress() == 1.0


def test_invalid_hp_trial_is_forgotten_and_replaced_without_counting() -> None:
    searcher = asha(max_trials=2, max_concurrent_trials=2)
    a, b = start(searcher)
    searcher.validation_completed(a, 0.1, 1)
    actions = searcher.trial_exited_early(a, ExitedReason.INVALID_HP)
    assert [type(x) for x in actions] == [CreateTrial]
    assert searcher.method.ids[0] == []
    # With a's 0.1 still recorded, b's 0.5 would rank 2nd of 2 and be stopped.
    assert stops(searcher.validation_completed(b, 0.5, 1)) == []
    assert searcher.method.created == 2


def test_errored_trial_ranks_last_in_its_rung() -> None:
    searcher = asha(max_trials=4, max_concurrent_trials=4)
    a, b, c, d = start(searcher)
    assert searcher.trial_exited_early(a, ExitedReason.ERRORED) == []  # max_trials all created
    searcher.validation_completed(b, 0.5, 1)
    searcher.validation_completed(c, 0.6, 1)
    # Rung 0 now holds b .5, d .55, c .6 and a (worst): keep 4 // 2 = 2, d ranks 2nd.
    assert stops(searcher.validation_completed(d, 0.55, 1)) == []


def test_nan_metric_ranks_worst() -> None:
    searcher = asha()
    a, b, c, _ = start(searcher)
    searcher.validation_completed(a, 0.5, 1)
    searcher.validation_completed(b, 0.6, 1)
    assert stops(searcher.validation_completed(c, float("nan"), 1)) == [c]


def test_all_trials_errored_shuts_down_as_failure() -> None:
    searcher = asha(max_trials=2, max_concurrent_trials=2)
    a, b = start(searcher)
    assert searcher.trial_exited_early(a, ExitedReason.ERRORED) == []
    assert searcher.trial_exited_early(b, ExitedReason.ERRORED) == [Shutdown(failure=True)]
    assert searcher.trial_exited(b) == []  # a second report of the same end is ignored


def test_progress_counts_finished_trials_and_partial_time() -> None:
    searcher = asha(max_trials=4, max_concurrent_trials=2)
    a, b = start(searcher)
    assert searcher.progress() == 0.0
    searcher.validation_completed(a, 0.1, 2)  # half of max_time
    assert searcher.progress() == pytest.approx(0.5 / 4)
    searcher.validation_completed(b, 0.9, 1)
    searcher.trial_exited(b)
    assert searcher.progress() == pytest.approx(1.5 / 4)


def test_target_length_is_max_time_and_unknown_ids_are_rejected() -> None:
    searcher = asha(max_time=400)
    a, *_ = start(searcher)
    assert searcher.trial_target_length(a) == 400.0
    assert searcher.trial_target_length("nope") is None
    with pytest.raises(ValueError, match="unknown trial"):
        searcher.validation_completed("nope", 0.1, 1)


def test_validation_metrics_reads_metric_and_time_metric() -> None:
    searcher = asha(metric="val_loss", max_trials=2, max_concurrent_trials=2)
    a, b = start(searcher)
    assert searcher.validation_metrics(a, {"val_loss": 0.1, "batches": 1, "acc": 0.9}) == []
    assert stops(searcher.validation_metrics(b, {"val_loss": 0.2, "batches": 1})) == [b]
    with pytest.raises(ValueError, match="'batches'"):
        searcher.validation_metrics(a, {"val_loss": 0.1})
    with pytest.raises(ValueError, match="'val_loss'"):
        searcher.validation_metrics(a, {"batches": 2})
