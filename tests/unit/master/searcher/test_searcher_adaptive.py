"""adaptive_asha: brackets per mode, trial and concurrency split, routing to brackets."""

from typing import Any

import pytest

from det.master.searcher import CreateTrial, StopTrial, new_searcher, parse_searcher_config
from det.master.searcher.asha import AdaptiveASHA, adaptive_plan

BASE = {
    "name": "adaptive_asha",
    "metric": "loss",
    "time_metric": "batches",
    "max_time": 81,
    "divisor": 3,
    "max_trials": 100,
}


# Hand-worked: max_rungs = min(5, floor(log3 81) + 1 = 5, floor(log3 100) + 1 = 5) = 5.
# Bracket weight 3 ** (n - 1) / n: n=5 16.2, n=4 6.75, n=3 3, n=2 1.5, n=1 1.
# standard (rungs 5, 4, 3; total 25.95): floor(62.4, 26.0, 11.6) = 62, 26, 11; +1 remainder to
# the first. conservative (total 28.45): floor(56.9, 23.7, 10.5, 5.3, 3.5) = 56, 23, 10, 5, 3; +3.
# max_concurrent_trials 16 is split evenly, remainder to the first brackets.
@pytest.mark.parametrize(
    ("mode", "plan"),
    [
        ("aggressive", [(5, 100, 16)]),
        ("standard", [(5, 63, 6), (4, 26, 5), (3, 11, 5)]),
        ("conservative", [(5, 59, 4), (4, 23, 3), (3, 10, 3), (2, 5, 3), (1, 3, 3)]),
    ],
)
def test_bracket_allocation_per_mode(mode: str, plan: list[tuple[int, int, int]]) -> None:
    assert adaptive_plan(parse_searcher_config({**BASE, "mode": mode})) == plan


@pytest.mark.parametrize(
    ("overrides", "plan"),
    [
        # floor(log3 10) + 1 = 3 rungs at most.
        ({"max_time": 10, "mode": "aggressive"}, [(3, 100, 16)]),
        # floor(log4 5) + 1 = 2; weights 4/2=2, 1/1=1 -> floor(3.33), floor(1.67) = 3, 1; +1.
        ({"max_trials": 5, "divisor": 4, "mode": "conservative"}, [(2, 4, 8), (1, 1, 8)]),
        # max_rungs caps too; standard of 2 rungs is (2-1)//2+1 = 1 .. 2; weights 1.5, 1 -> 60, 40.
        ({"max_rungs": 2, "mode": "standard"}, [(2, 60, 8), (1, 40, 8)]),
        # Fewer concurrent slots than brackets: every bracket still gets one.
        ({"mode": "standard", "max_concurrent_trials": 2}, [(5, 63, 1), (4, 26, 1), (3, 11, 1)]),
        # No limit: each bracket runs max(last bracket's trials, divisor).
        ({"mode": "standard", "max_concurrent_trials": 0}, [(5, 63, 11), (4, 26, 11), (3, 11, 11)]),
        # Explicit bracket_rungs win over mode, most rungs first; weights 6.75, 1.5 (total 8.25)
        # -> floor(81.8), floor(18.2) = 81, 18; +1 remainder to the first.
        ({"bracket_rungs": [2, 4], "mode": "aggressive"}, [(4, 82, 8), (2, 18, 8)]),
    ],
)
def test_bracket_allocation_edge_cases(
    overrides: dict[str, Any], plan: list[tuple[int, int, int]]
) -> None:
    assert adaptive_plan(parse_searcher_config({**BASE, **overrides})) == plan


def test_initial_trials_fill_every_bracket_and_events_route_to_their_bracket() -> None:
    searcher = new_searcher(
        {**BASE, "mode": "standard"}, {"x": {"type": "double", "minval": 0, "maxval": 1}}, 1
    )
    actions = searcher.initial_trials()
    assert len(actions) == 6 + 5 + 5
    method = searcher.method
    assert isinstance(method, AdaptiveASHA)
    by_bracket = [method.bracket_of(a.request_id) for a in actions if isinstance(a, CreateTrial)]
    assert by_bracket == [0] * 6 + [1] * 5 + [2] * 5
    assert [b.rung_times for b in method.brackets] == [
        [1.0, 3.0, 9.0, 27.0, 81.0],
        [3.0, 9.0, 27.0, 81.0],
        [9.0, 27.0, 81.0],
    ]
    first, second = actions[0].request_id, actions[1].request_id
    assert searcher.validation_completed(first, 0.1, 1) == []
    assert searcher.validation_completed(second, 0.2, 1) == [StopTrial(second)]
    # Bracket 1's first rung is at 3 batches: a report at 1 batch records nothing there.
    other = actions[6].request_id
    assert searcher.validation_completed(other, 0.9, 1) == []
    assert method.brackets[1].losses[0] == []
    replacement = searcher.trial_exited(second)
    assert len(replacement) == 1 and method.bracket_of(replacement[0].request_id) == 0
    assert searcher.trial_target_length(other) == 81.0


def test_progress_averages_brackets() -> None:
    searcher = new_searcher(
        {**BASE, "max_trials": 4, "mode": "aggressive", "max_concurrent_trials": 4}, {}, 1
    )
    ids = [a.request_id for a in searcher.initial_trials()]
    searcher.trial_exited(ids[0])
    assert searcher.progress() == pytest.approx(0.25)


def test_aggressive_bracket_keeps_floor_of_a_third_as_determined_does() -> None:
    """Hand-worked, rung 1 (1 batch) of the one aggressive bracket, divisor 3: a trial continues
    iff it ranks among the best max(floor(n / 3), 1) of the n losses recorded there. The "top
    third, rounded up" variant (rank < n / 3) would keep D (2nd of 4) too: Determined's
    asha_stopping.go does not, and bench/hpo.py measures this rounding as the better one."""
    searcher = new_searcher(
        {**BASE, "mode": "aggressive", "max_concurrent_trials": 7},
        {"x": {"type": "double", "minval": 0, "maxval": 1}},
        1,
    )
    ids = [a.request_id for a in searcher.initial_trials() if isinstance(a, CreateTrial)]
    losses = [0.5, 0.4, 0.6, 0.45, 0.3, 0.42, 0.35]
    # n=1 keep 1: A 1st; n=2 keep 1: B 1st; n=3 keep 1: C 3rd; n=4 keep 1: D 2nd;
    # n=5 keep 1: E 1st; n=6 keep 2: F 3rd; n=7 keep 2: G 2nd.
    pairs = zip(ids, losses, strict=True)
    stopped = [searcher.validation_completed(rid, loss, 1) != [] for rid, loss in pairs]
    assert stopped == [False, False, True, True, False, True, False]
