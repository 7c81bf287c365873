"""``async_halving`` (ASHA, stopping variant) and ``adaptive_asha`` (a tournament of brackets).

ASHA here never promotes: every trial trains toward ``max_time`` and is stopped early when it is
not good enough. Rung ``i`` of ``n`` sits at ``max_time / divisor ** (n - 1 - i)`` units of the
``time_metric``. When a validation shows a trial has reached a rung, its loss is ranked among
the losses recorded at that rung; it continues only if it is among the best
``max(floor(len(rung) / divisor), 1)`` (ties rank the newcomer first, as Determined does). A trial
reaching the top rung is done and is stopped. A validation may clear several rungs at once.

Differences from Determined 0.38, on purpose: a replacement trial is created when a trial has
*exited* (Determined creates it as soon as it emits the stop, so a checkpointing trial and its
replacement briefly overshoot ``max_concurrent_trials``), and a trial that ends by itself before
the top rung also frees its slot (Determined would not create a replacement for it).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

from pydantic import TypeAdapter
from typing_extensions import TypedDict

from det.common.jsontypes import JSONObject, JSONValue

from .actions import Action, CreateTrial, ExitedReason, StopTrial
from .base import SearchContext, SearchMethod, decode_float, encode_float, load_state
from .config import AdaptiveAshaSearcher, AsyncHalvingSearcher

WORST = float("inf")


class RungState(TypedDict):
    time: float
    metrics: list[tuple[float | str, str]]  # (loss, request id), best first


class HalvingState(TypedDict):
    rungs: list[RungState]
    trial_rungs: dict[str, int]
    running: dict[str, float]
    created: int
    finished: int


class AdaptiveState(TypedDict):
    trial_table: dict[str, int]
    brackets: list[JSONObject]


_HALVING_STATE = TypeAdapter(HalvingState)
_ADAPTIVE_STATE = TypeAdapter(AdaptiveState)


def rung_times(num_rungs: int, divisor: float, max_time: float) -> list[float]:
    return [max_time / divisor ** (num_rungs - 1 - i) for i in range(num_rungs)]


def _reached(time_value: float, needed: float) -> bool:
    # Rung times are quotients (100 / 3 ** 2); don't let rounding keep a trial below a rung.
    return time_value >= needed * (1 - 1e-9)


class AsyncHalving(SearchMethod):
    def __init__(
        self,
        ctx: SearchContext,
        *,
        max_trials: int,
        max_concurrent_trials: int,
        num_rungs: int,
        divisor: float,
        max_time: float,
    ) -> None:
        super().__init__(ctx)
        self.max_trials = max_trials
        self.num_rungs = num_rungs
        self.divisor = divisor
        self.max_time = max_time
        if max_concurrent_trials > 0:
            self.max_concurrent_trials = min(max_concurrent_trials, max_trials)
        else:
            default = int(divisor ** (num_rungs - 1))
            self.max_concurrent_trials = max(1, min(default, max_trials))
        self.rung_times = rung_times(num_rungs, divisor, max_time)
        # Per rung, the recorded losses sorted ascending and the request ids in the same order.
        self.losses: list[list[float]] = [[] for _ in range(num_rungs)]
        self.ids: list[list[str]] = [[] for _ in range(num_rungs)]
        self.trial_rungs: dict[str, int] = {}
        self.running: dict[str, float] = {}  # request id -> latest reported time
        self.created = 0  # trials that count toward max_trials
        self.finished = 0

    # -- helpers -------------------------------------------------------------------------

    def _create(self) -> list[Action]:
        if self.created >= self.max_trials:
            return []
        self.created += 1
        create = self.ctx.create()
        self.trial_rungs[create.request_id] = 0
        self.running[create.request_id] = 0.0
        return [create]

    def _insert(self, rung: int, loss: float, request_id: str) -> int:
        index = bisect.bisect_left(self.losses[rung], loss)
        self.losses[rung].insert(index, loss)
        self.ids[rung].insert(index, request_id)
        return index

    def _remove(self, rung: int, request_id: str) -> None:
        if request_id in self.ids[rung]:
            index = self.ids[rung].index(request_id)
            del self.ids[rung][index]
            del self.losses[rung][index]

    def _end(self, request_id: str) -> None:
        self.running.pop(request_id, None)

    # -- events --------------------------------------------------------------------------

    def initial_trials(self) -> list[Action]:
        actions: list[Action] = []
        for _ in range(self.max_concurrent_trials):
            actions += self._create()
        return actions

    def validation_completed(self, request_id: str, loss: float, time_value: float) -> list[Action]:
        if request_id not in self.running:
            return []
        self.running[request_id] = max(self.running[request_id], time_value)
        for rung in range(self.trial_rungs[request_id], self.num_rungs):
            self.trial_rungs[request_id] = rung
            if not _reached(time_value, self.rung_times[rung]):
                return []
            if request_id in self.ids[rung]:
                continue  # already ranked here (a repeated report at the same length)
            index = self._insert(rung, loss, request_id)
            if rung == self.num_rungs - 1:
                return [StopTrial(request_id)]
            keep = max(int(len(self.losses[rung]) / self.divisor), 1)
            if index >= keep:
                return [StopTrial(request_id)]
        return []

    def trial_exited(self, request_id: str) -> list[Action]:
        self._end(request_id)
        self.finished += 1
        return self._create()

    def trial_exited_early(self, request_id: str, reason: ExitedReason) -> list[Action]:
        self._end(request_id)
        current = self.trial_rungs.get(request_id, 0)
        if reason is ExitedReason.INVALID_HP:
            for rung in range(current + 1):
                self._remove(rung, request_id)
            self.created -= 1
            return self._create()
        if request_id not in self.ids[current]:
            # A failed trial ranks last where it stopped, so it still tightens that rung.
            self._insert(current, WORST, request_id)
        self.finished += 1
        return self._create()

    def progress(self, running: Mapping[str, float]) -> float:
        # The bracket knows how far its trials got from their validations' time_metric.
        partial = sum(min(t / self.max_time, 1.0) for t in self.running.values())
        return (self.finished + partial) / self.max_trials

    def target_length(self, request_id: str) -> float | None:
        return self.max_time

    def snapshot(self) -> JSONObject:
        return {
            "rungs": [
                {"time": t, "metrics": [[encode_float(v), i] for v, i in zip(ls, ids, strict=True)]}
                for t, ls, ids in zip(self.rung_times, self.losses, self.ids, strict=True)
            ],
            "trial_rungs": {k: v for k, v in self.trial_rungs.items()},
            "running": {k: v for k, v in self.running.items()},
            "created": self.created,
            "finished": self.finished,
        }

    def restore(self, state: JSONValue) -> None:
        loaded = load_state(_HALVING_STATE, state, "method")
        self.losses = [[decode_float(v) for v, _ in r["metrics"]] for r in loaded["rungs"]]
        self.ids = [[i for _, i in r["metrics"]] for r in loaded["rungs"]]
        self.trial_rungs = dict(loaded["trial_rungs"])
        self.running = {k: float(v) for k, v in loaded["running"].items()}
        self.created = loaded["created"]
        self.finished = loaded["finished"]


def new_async_halving(ctx: SearchContext, config: AsyncHalvingSearcher) -> AsyncHalving:
    return AsyncHalving(
        ctx,
        max_trials=config.max_trials,
        max_concurrent_trials=config.max_concurrent_trials,
        num_rungs=config.num_rungs,
        divisor=config.divisor,
        max_time=config.time_budget()[1],
    )


# -- adaptive_asha ---------------------------------------------------------------------------


def _floor_log(value: float, base: float) -> int:
    """Largest k >= 0 with base ** k <= value (exact where float log is not)."""
    k = 0
    while base ** (k + 1) <= value * (1 + 1e-9):
        k += 1
    return k


def bracket_rungs(config: AdaptiveAshaSearcher) -> list[int]:
    """Rungs per bracket, most aggressive (most rungs) first."""
    if config.bracket_rungs:
        return sorted(config.bracket_rungs, reverse=True)
    max_rungs = min(
        config.max_rungs,
        _floor_log(config.time_budget()[1], config.divisor) + 1,
        _floor_log(config.max_trials, config.divisor) + 1,
    )
    if config.mode == "aggressive":
        rungs = [max_rungs]
    elif config.mode == "standard":
        rungs = list(range((max_rungs - 1) // 2 + 1, max_rungs + 1))
    else:
        rungs = list(range(1, max_rungs + 1))
    return sorted(rungs, reverse=True)


def bracket_max_trials(max_trials: int, divisor: float, brackets: list[int]) -> list[int]:
    """Split max_trials so each bracket gets roughly the same total training budget.

    A bracket of n rungs spends about n full lengths per divisor ** (n - 1) trials, so it is
    weighted divisor ** (n - 1) / n; each gets at least one trial and the first (most
    aggressive) bracket takes the rounding remainder.
    """
    weights = [divisor ** (n - 1) / n for n in brackets]
    total = sum(weights)
    trials = [max(int(w / total * max_trials), 1) for w in weights]
    trials[0] += max(max_trials - sum(trials), 0)
    return trials


def bracket_max_concurrent(max_concurrent: int, divisor: float, trials: list[int]) -> list[int]:
    """Split max_concurrent_trials evenly (remainder to the first brackets); every bracket gets
    at least one. With no limit (0), each bracket runs max(last bracket's trials, divisor)."""
    count = len(trials)
    if max_concurrent == 0:
        return [max(trials[-1], int(divisor))] * count
    max_concurrent = max(max_concurrent, count)
    out = [max_concurrent // count] * count
    for i in range(max_concurrent % count):
        out[i] += 1
    return out


def adaptive_plan(config: AdaptiveAshaSearcher) -> list[tuple[int, int, int]]:
    """(num_rungs, max_trials, max_concurrent_trials) of each adaptive_asha bracket."""
    rungs = bracket_rungs(config)
    trials = bracket_max_trials(config.max_trials, config.divisor, rungs)
    concurrent = bracket_max_concurrent(config.max_concurrent_trials, config.divisor, trials)
    return list(zip(rungs, trials, concurrent, strict=True))


class AdaptiveASHA(SearchMethod):
    """A tournament: each bracket is an ``AsyncHalving``; events go to the trial's bracket."""

    def __init__(self, ctx: SearchContext, config: AdaptiveAshaSearcher) -> None:
        super().__init__(ctx)
        max_time = config.time_budget()[1]
        self.brackets = [
            AsyncHalving(
                ctx,
                max_trials=trials,
                max_concurrent_trials=concurrent,
                num_rungs=rungs,
                divisor=config.divisor,
                max_time=max_time,
            )
            for rungs, trials, concurrent in adaptive_plan(config)
        ]
        self.trial_table: dict[str, int] = {}

    def _mark(self, bracket: int, actions: list[Action]) -> list[Action]:
        for action in actions:
            if isinstance(action, CreateTrial):
                self.trial_table[action.request_id] = bracket
        return actions

    def _owner(self, request_id: str) -> tuple[int, AsyncHalving]:
        index = self.trial_table[request_id]
        return index, self.brackets[index]

    def initial_trials(self) -> list[Action]:
        actions: list[Action] = []
        for index, bracket in enumerate(self.brackets):
            actions += self._mark(index, bracket.initial_trials())
        return actions

    def validation_completed(self, request_id: str, loss: float, time_value: float) -> list[Action]:
        index, bracket = self._owner(request_id)
        return self._mark(index, bracket.validation_completed(request_id, loss, time_value))

    def trial_exited(self, request_id: str) -> list[Action]:
        index, bracket = self._owner(request_id)
        return self._mark(index, bracket.trial_exited(request_id))

    def trial_exited_early(self, request_id: str, reason: ExitedReason) -> list[Action]:
        index, bracket = self._owner(request_id)
        return self._mark(index, bracket.trial_exited_early(request_id, reason))

    def progress(self, running: Mapping[str, float]) -> float:
        return sum(b.progress(running) for b in self.brackets) / len(self.brackets)

    def target_length(self, request_id: str) -> float | None:
        return self._owner(request_id)[1].max_time

    def bracket_of(self, request_id: str) -> int:
        return self.trial_table[request_id]

    def snapshot(self) -> JSONObject:
        return {
            "trial_table": {k: v for k, v in self.trial_table.items()},
            "brackets": [b.snapshot() for b in self.brackets],
        }

    def restore(self, state: JSONValue) -> None:
        loaded = load_state(_ADAPTIVE_STATE, state, "method")
        self.trial_table = dict(loaded["trial_table"])
        for bracket, sub in zip(self.brackets, loaded["brackets"], strict=True):
            bracket.restore(sub)
