"""snapshot()/restore() mid-search continues with identical decisions; determinism by seed."""

import json
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
from det.master.searcher.simulate import SyntheticCurve

HP = {
    "x": {"type": "double", "minval": 0, "maxval": 1, "count": 4},
    "opt": {"lr": {"type": "log", "minval": -4, "maxval": -1, "count": 2}, "name": "sgd"},
    "act": {"type": "categorical", "vals": ["relu", "tanh", "gelu"]},
}
ASHA = {"metric": "loss", "time_metric": "batches", "max_time": 27, "divisor": 3}
CONFIGS = {
    "random": {"name": "random", "metric": "loss", "max_trials": 12, "max_concurrent_trials": 3},
    "grid": {"name": "grid", "metric": "loss", "max_concurrent_trials": 5},
    "async_halving": {
        **ASHA,
        "name": "async_halving",
        "num_rungs": 4,
        "max_trials": 30,
        "max_concurrent_trials": 6,
    },
    "adaptive_asha": {
        **ASHA,
        "name": "adaptive_asha",
        "mode": "conservative",
        "max_trials": 40,
        "max_concurrent_trials": 7,
    },
}


def drive(config: dict[str, Any], seed: int, restore_at: int | None = None) -> list[Any]:
    """Round-robin over live trials: report at 1, 3, 9, 27 batches, then exit. Trials with
    x > 0.85 fail INVALID_HP and x < 0.05 fail ERRORED at their first step."""
    searcher: Searcher = new_searcher(config, HP, seed)
    curve = SyntheticCurve(HP, seed=2, noise=0.05)
    log: list[Any] = []
    queue: deque[tuple[CreateTrial, int]] = deque()
    stopped: set[str] = set()

    def apply(actions: list[Any]) -> None:
        log.append([a.to_dict() for a in actions])
        log.append(round(searcher.progress(), 12))
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
        if k == 0 and x > 0.85:
            apply(searcher.trial_exited_early(rid, ExitedReason.INVALID_HP))
        elif k == 0 and x < 0.05:
            apply(searcher.trial_exited_early(rid, ExitedReason.ERRORED))
        elif rid in stopped or k == len(times):
            apply(searcher.trial_exited(rid))
        else:
            apply(
                searcher.validation_completed(
                    rid, curve(create.hparams, times[k], create.seed), times[k]
                )
            )
            queue.append((create, k + 1))
    return log


@pytest.mark.parametrize("name", list(CONFIGS))
def test_restored_searcher_makes_identical_decisions(name: str) -> None:
    baseline = drive(CONFIGS[name], seed=5)
    flat = [a for entry in baseline if isinstance(entry, list) for a in entry]
    assert flat[-1] == Shutdown().to_dict()
    if name in ("async_halving", "adaptive_asha"):
        assert any(a["type"] == "stop" for a in flat)
    for restore_at in (1, 7, 23, 60):
        assert drive(CONFIGS[name], seed=5, restore_at=restore_at) == baseline, restore_at


@pytest.mark.parametrize("name", list(CONFIGS))
def test_same_seed_same_search_other_seed_other_search(name: str) -> None:
    assert drive(CONFIGS[name], seed=8) == drive(CONFIGS[name], seed=8)
    assert drive(CONFIGS[name], seed=8) != drive(CONFIGS[name], seed=9)


def test_snapshot_is_strict_json_even_with_failed_trials_ranked_worst() -> None:
    searcher = new_searcher(CONFIGS["async_halving"], HP, 1)
    first = searcher.initial_trials()[0].request_id
    searcher.trial_exited_early(first, ExitedReason.ERRORED)
    snap = searcher.snapshot()
    assert snap["method"]["rungs"][0]["metrics"] == [["Infinity", first]]
    restored = Searcher.restore(json.loads(json.dumps(snap, allow_nan=False)))
    assert restored.method.losses[0] == [float("inf")]


def test_restore_rejects_unknown_version() -> None:
    snap = new_searcher(CONFIGS["random"], HP, 1).snapshot()
    with pytest.raises(ValueError, match="version"):
        Searcher.restore({**snap, "version": 99})
