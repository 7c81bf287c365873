"""``single``, ``random`` and ``grid``: searchers that never stop a trial.

Each keeps at most ``max_concurrent_trials`` trials alive (0 = no limit) and creates the next one
when a trial exits. Their trials decide their own training length (Determined 0.38 dropped
``max_length`` from these searchers); ``target_length`` reports the deprecated ``max_length``
when a config still has it.

Progress is trials' worth of training out of the search's budget (``max_trials``, or the grid's
points): 1 for each trial that exited (completed, errored or canceled; an INVALID_HP trial is
replaced and counts nothing), plus the fraction each unfinished trial, running or paused, last
reported (``core.train.report_progress``, as Determined's trial classes do). Determined averages
over the trials created so far instead, so with ``max_concurrent_trials`` below the budget it
shows 50% when the first trials are half done; here the same point shows its share of the whole.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import TypeAdapter
from typing_extensions import TypedDict

from det.common.jsontypes import JSONObject, JSONValue

from .actions import Action, ExitedReason
from .base import SearchContext, SearchMethod, load_state
from .hparams import grid_points


class RandomState(TypedDict):
    created: int
    finished: int


class GridState(TypedDict):
    next_point: int
    finished: int


_RANDOM_STATE = TypeAdapter(RandomState)
_GRID_STATE = TypeAdapter(GridState)


def _trained(running: Mapping[str, float]) -> float:
    """How many trials' worth the unfinished ones have trained (each reported fraction, clamped
    to [0, 1])."""
    return sum(min(max(f, 0.0), 1.0) for f in running.values())


def _initial_count(total: int, max_concurrent: int) -> int:
    return total if max_concurrent <= 0 else min(total, max_concurrent)


class RandomSearch(SearchMethod):
    """``random`` (and ``single``, which is random with one trial).

    An INVALID_HP trial is replaced by a freshly sampled one and is not counted toward
    ``max_trials``; a trial that errored or was canceled counts as done.
    """

    def __init__(
        self,
        ctx: SearchContext,
        max_trials: int,
        max_concurrent_trials: int,
        max_length: float | None = None,
    ) -> None:
        super().__init__(ctx)
        self.max_trials = max_trials
        self.max_concurrent_trials = max_concurrent_trials
        self.max_length = max_length  # the deprecated ``max_length``'s units, if any
        self.created = 0
        self.finished = 0

    def _create(self) -> list[Action]:
        if self.created >= self.max_trials:
            return []
        self.created += 1
        return [self.ctx.create()]

    def initial_trials(self) -> list[Action]:
        actions: list[Action] = []
        for _ in range(_initial_count(self.max_trials, self.max_concurrent_trials)):
            actions += self._create()
        return actions

    def validation_completed(self, request_id: str, loss: float, time_value: float) -> list[Action]:
        return []

    def trial_exited(self, request_id: str) -> list[Action]:
        self.finished += 1
        return self._create()

    def trial_exited_early(self, request_id: str, reason: ExitedReason) -> list[Action]:
        if reason is ExitedReason.INVALID_HP:
            self.created -= 1
        else:
            self.finished += 1
        return self._create()

    def progress(self, running: Mapping[str, float]) -> float:
        return (self.finished + _trained(running)) / self.max_trials

    def target_length(self, request_id: str) -> float | None:
        return self.max_length

    def snapshot(self) -> JSONObject:
        return {"created": self.created, "finished": self.finished}

    def restore(self, state: JSONValue) -> None:
        loaded = load_state(_RANDOM_STATE, state, "method")
        self.created = loaded["created"]
        self.finished = loaded["finished"]


class GridSearch(SearchMethod):
    """``grid``: one trial per point of the cartesian product of the hyperparameter axes.

    An INVALID_HP trial is not replaced: its grid point is simply unusable.
    """

    def __init__(
        self, ctx: SearchContext, max_concurrent_trials: int, max_length: float | None = None
    ) -> None:
        super().__init__(ctx)
        self.max_concurrent_trials = max_concurrent_trials
        self.max_length = max_length  # the deprecated ``max_length``'s units, if any
        self.points = grid_points(ctx.space)
        self.next_point = 0
        self.finished = 0

    def _create(self) -> list[Action]:
        if self.next_point >= len(self.points):
            return []
        point = self.points[self.next_point]
        self.next_point += 1
        return [self.ctx.create(point)]

    def initial_trials(self) -> list[Action]:
        actions: list[Action] = []
        for _ in range(_initial_count(len(self.points), self.max_concurrent_trials)):
            actions += self._create()
        return actions

    def validation_completed(self, request_id: str, loss: float, time_value: float) -> list[Action]:
        return []

    def trial_exited(self, request_id: str) -> list[Action]:
        self.finished += 1
        return self._create()

    def trial_exited_early(self, request_id: str, reason: ExitedReason) -> list[Action]:
        return self.trial_exited(request_id)

    def progress(self, running: Mapping[str, float]) -> float:
        return (self.finished + _trained(running)) / max(len(self.points), 1)

    def target_length(self, request_id: str) -> float | None:
        return self.max_length

    def snapshot(self) -> JSONObject:
        return {"next_point": self.next_point, "finished": self.finished}

    def restore(self, state: JSONValue) -> None:
        loaded = load_state(_GRID_STATE, state, "method")
        self.next_point = loaded["next_point"]
        self.finished = loaded["finished"]
