"""Offline runs of a searcher: ``simulate`` against a learning-curve function, ``preview``.

The simulator is a discrete-event loop on a virtual clock: every alive trial trains at one
``time_metric`` unit per clock unit, reports a validation at each rung boundary of its bracket
(or every ``validate_every`` units) and at its target length, stops at once when the searcher
says so, and exits. New trials start when the searcher creates them, so the searcher's own
``max_concurrent_trials`` sets the parallelism. Budget = total units trained by all trials.
Nothing here reads a clock or does I/O; same searcher + curve ⇒ same result.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from det.common.jsontypes import JSONObject, JSONValue
from det.master.expconf.hyperparameters import CategoricalHP, LogHP, RangeHP

from .actions import Action, CreateTrial, ExitedReason, Shutdown, StopTrial
from .asha import AdaptiveASHA, AsyncHalving
from .hparams import leaves, parse_hyperparameters
from .searcher import Searcher, new_searcher

# (hparams, time_value, trial seed) -> searcher metric
CurveFn = Callable[[JSONObject, float, int], float]
# hparams -> a reason the trial fails at once (e.g. INVALID_HP), or None
ExitFn = Callable[[JSONObject], ExitedReason | None]


@dataclass(frozen=True)
class SimTrial:
    request_id: str
    hparams: JSONObject
    seed: int
    trained: float
    outcome: str  # "completed" (trained to its length), "stopped" (by the searcher) or a reason
    stopped_at_rung: int | None  # highest rung reached when the searcher stopped it
    best_metric: float | None

    def to_dict(self) -> JSONObject:
        return {
            "request_id": self.request_id,
            "hparams": self.hparams,
            "seed": self.seed,
            "trained": self.trained,
            "outcome": self.outcome,
            "stopped_at_rung": self.stopped_at_rung,
            "best_metric": self.best_metric,
        }


@dataclass(frozen=True)
class SimResult:
    searcher: str
    smaller_is_better: bool
    trials: tuple[SimTrial, ...]
    budget: float
    best_metric: float | None
    best_request_id: str | None
    # (budget used when it was reported, new best metric), in order.
    trajectory: tuple[tuple[float, float], ...] = field(default=())
    finished: bool = True  # False when max_budget or max_events cut the run short

    def budget_to_reach(self, target: float) -> float | None:
        """Budget spent when the best metric first reached ``target`` (None if never)."""
        for budget, metric in self.trajectory:
            if (metric <= target) if self.smaller_is_better else (metric >= target):
                return budget
        return None

    def to_dict(self) -> JSONObject:
        return {
            "searcher": self.searcher,
            "trials": [t.to_dict() for t in self.trials],
            "budget": self.budget,
            "best_metric": self.best_metric,
            "best_request_id": self.best_request_id,
            "trajectory": [[budget, metric] for budget, metric in self.trajectory],
            "finished": self.finished,
        }


def _rung_times(searcher: Searcher, request_id: str) -> list[float]:
    method = searcher.method
    if isinstance(method, AdaptiveASHA):
        return method.brackets[method.bracket_of(request_id)].rung_times
    if isinstance(method, AsyncHalving):
        return method.rung_times
    return []


@dataclass
class _Live:
    create: CreateTrial
    start: float
    length: float
    reports: list[float]
    best: float | None = None
    trained: float = 0.0
    outcome: str | None = None
    rung: int | None = None


def simulate(
    searcher: Searcher,
    curve_fn: CurveFn,
    *,
    validate_every: float | None = None,
    default_length: float | None = None,
    exit_fn: ExitFn | None = None,
    max_budget: float | None = None,
    max_events: int = 1_000_000,
) -> SimResult:
    """Run a fresh ``searcher`` to its ``Shutdown`` (or until ``max_budget`` units are spent).

    ``default_length`` is the length of trials whose searcher has no target length (random,
    grid without ``max_length``); it is required for those.
    """
    sib = searcher.config.smaller_is_better
    live: dict[str, _Live] = {}
    order: list[str] = []
    events: list[tuple[float, int, str, str, float]] = []
    seq = 0
    clock = 0.0
    budget = 0.0
    best: tuple[float, str] | None = None
    trajectory: list[tuple[float, float]] = []
    done = False

    def push(at: float, kind: str, rid: str, value: float = 0.0) -> None:
        nonlocal seq
        heapq.heappush(events, (at, seq, kind, rid, value))
        seq += 1

    def apply(actions: list[Action]) -> None:
        nonlocal done
        for action in actions:
            if isinstance(action, CreateTrial):
                start(action)
            elif isinstance(action, StopTrial):
                trial = live[action.request_id]
                if trial.outcome is None:
                    trial.outcome = "stopped"
                    trial.trained = clock - trial.start
                    times = _rung_times(searcher, action.request_id)
                    reached = [i for i, t in enumerate(times) if trial.trained >= t * (1 - 1e-9)]
                    trial.rung = reached[-1] if reached else None
                    push(clock, "exit", action.request_id)
            elif isinstance(action, Shutdown):
                done = True

    def start(create: CreateTrial) -> None:
        rid = create.request_id
        length = searcher.trial_target_length(rid) or default_length
        if length is None:
            raise ValueError("simulate: default_length is required for this searcher")
        if validate_every:
            reports = [validate_every * k for k in range(1, int(length / validate_every) + 1)]
        else:
            reports = [t for t in _rung_times(searcher, rid) if t < length]
        if not reports or reports[-1] < length:
            reports.append(length)
        live[rid] = _Live(create, clock, length, reports)
        order.append(rid)
        apply(searcher.trial_created(rid))
        reason = exit_fn(create.hparams) if exit_fn else None
        if reason is not None:
            live[rid].outcome = reason.value
            push(clock, "early", rid)
        else:
            push(clock + reports[0], "report", rid, reports[0])

    apply(searcher.initial_trials())
    handled = 0
    while events and not done and handled < max_events:
        at, _, kind, rid, value = heapq.heappop(events)
        running = sum(1 for t in live.values() if t.outcome is None)
        budget += (at - clock) * running
        clock = at
        handled += 1
        trial = live[rid]
        if kind == "report":
            if trial.outcome is not None:
                continue
            metric = curve_fn(trial.create.hparams, value, trial.create.seed)
            if trial.best is None or (metric < trial.best if sib else metric > trial.best):
                trial.best = metric
            if best is None or (metric < best[0] if sib else metric > best[0]):
                best = (metric, rid)
                trajectory.append((budget, metric))
            apply(searcher.validation_completed(rid, metric, value))
            if trial.outcome is None:
                remaining = [t for t in trial.reports if t > value]
                if remaining:
                    push(trial.start + remaining[0], "report", rid, remaining[0])
                else:
                    trial.outcome = "completed"
                    trial.trained = value
                    push(clock, "exit", rid)
        elif kind == "exit":
            apply(searcher.trial_exited(rid))
        else:
            apply(searcher.trial_exited_early(rid, ExitedReason(trial.outcome)))
        if max_budget is not None and budget >= max_budget:
            break

    trials = []
    for rid in order:
        t = live[rid]
        trained = t.trained if t.outcome is not None else clock - t.start
        trials.append(
            SimTrial(rid, t.create.hparams, t.create.seed, trained, t.outcome or "running",
                     t.rung, t.best)
        )  # fmt: skip
    return SimResult(
        searcher=searcher.config.name,
        smaller_is_better=sib,
        trials=tuple(trials),
        budget=budget,
        best_metric=best[0] if best else None,
        best_request_id=best[1] if best else None,
        trajectory=tuple(trajectory),
        finished=done,
    )


# -- synthetic learning curves ---------------------------------------------------------------


def _unit(hp: RangeHP, value: JSONValue) -> float:
    """Where ``value`` sits in its hyperparameter's range, in [0, 1]."""
    if isinstance(hp, CategoricalHP):
        index = next((i for i, v in enumerate(hp.vals) if v == value), 0)
        return index / max(len(hp.vals) - 1, 1)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number for a {type(hp).__name__}, got {value!r}")
    x = math.log(value, hp.base) if isinstance(hp, LogHP) else float(value)
    return 0.5 if hp.maxval == hp.minval else (x - hp.minval) / (hp.maxval - hp.minval)


@dataclass(frozen=True)
class SyntheticCurve:
    """loss(h, t) = a(h) + b(h) / sqrt(t) + noise, from a seeded random landscape.

    ``a`` is the final loss: a weighted quadratic around a random optimum in the normalised
    hyperparameter space. ``b`` (how slowly a trial learns) is ``0.2 + a(h)`` plus ``crossing``
    times a quadratic with a different optimum, so early ranking predicts the final ranking only
    partly and curves cross (``crossing=0``: perfectly predictive). The noise is a
    deterministic function of (trial seed, t).
    """

    hyperparameters: JSONObject
    seed: int = 0
    noise: float = 0.01
    crossing: float = 0.5
    # The section's ranges, validated once (a curve is evaluated at every report).
    _leaves: list[tuple[tuple[str, ...], RangeHP]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_leaves", leaves(parse_hyperparameters(self.hyperparameters)))

    def __call__(self, hparams: JSONObject, t: float, trial_seed: int) -> float:
        rng = random.Random(self.seed)
        a, slow = 0.0, 0.0
        for route, hp in self._leaves:
            value: JSONValue = hparams
            for key in route:
                if not isinstance(value, dict):
                    raise ValueError(f"hyperparameters.{'.'.join(route)}: not in {hparams!r}")
                value = value[key]
            u = _unit(hp, value)
            c, d, w = rng.random(), rng.random(), rng.uniform(0.5, 2.0)
            a += w * (u - c) ** 2
            slow += (u - d) ** 2
        b = 0.2 + a + self.crossing * slow
        eps = random.Random(f"{self.seed}:{trial_seed}:{t!r}").gauss(0.0, 1.0)
        return a + b / math.sqrt(max(t, 1e-9)) + self.noise * eps


# -- preview ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreviewTrial:
    request_id: str
    hparams: JSONObject
    seed: int
    length: float | None  # units it would train (None: the training code decides)
    stopped_at_rung: int | None


@dataclass(frozen=True)
class PreviewRung:
    length: float  # units of the time metric a trial has trained when it is ranked here
    trials: int  # how many of the bracket's trials reach it


@dataclass(frozen=True)
class PreviewBracket:
    """One ASHA bracket of the preview (``async_halving`` has one; ``adaptive_asha`` one per
    bracket of its mode, most rungs first)."""

    trials: int
    rungs: tuple[PreviewRung, ...]


@dataclass(frozen=True)
class Preview:
    """What a searcher would do, simulated with random metrics (``det preview-search``)."""

    searcher: str
    time_metric: str | None
    trials: tuple[PreviewTrial, ...]
    total_length: float | None  # summed over trials; None when lengths are unknown
    sampler: str  # how new trials' hyperparameters are chosen (det's ``sampler``)
    brackets: tuple[PreviewBracket, ...] = ()  # the ASHA searchers' rungs; () for the others

    def length_counts(self) -> list[tuple[float | None, int]]:
        """(length, number of trials that train that long), longest first."""
        counts: dict[float | None, int] = {}
        for t in self.trials:
            counts[t.length] = counts.get(t.length, 0) + 1
        return sorted(counts.items(), key=lambda kv: -(kv[0] or 0.0))

    def to_dict(self) -> JSONObject:
        return {
            "searcher": self.searcher,
            "timeMetric": self.time_metric,
            "numTrials": len(self.trials),
            "totalLength": self.total_length,
            "lengthCounts": [{"length": n, "trials": c} for n, c in self.length_counts()],
            "sampler": self.sampler,
            "brackets": [
                {
                    "trials": b.trials,
                    "rungs": [{"length": r.length, "trials": r.trials} for r in b.rungs],
                }
                for b in self.brackets
            ],
            "trials": [
                {
                    "requestId": t.request_id,
                    "hparams": t.hparams,
                    "seed": t.seed,
                    "length": t.length,
                    "stoppedAtRung": t.stopped_at_rung,
                }
                for t in self.trials
            ],
        }


def _preview_brackets(searcher: Searcher, result: SimResult) -> tuple[PreviewBracket, ...]:
    method = searcher.method
    owner: Callable[[str], int]
    if isinstance(method, AdaptiveASHA):
        halvings, owner = method.brackets, method.bracket_of
    elif isinstance(method, AsyncHalving):
        halvings, owner = [method], (lambda _: 0)
    else:
        return ()
    out = []
    for index, halving in enumerate(halvings):
        trained = [t.trained for t in result.trials if owner(t.request_id) == index]
        rungs = tuple(
            PreviewRung(length, sum(1 for units in trained if units >= length * (1 - 1e-9)))
            for length in halving.rung_times
        )
        out.append(PreviewBracket(len(trained), rungs))
    return tuple(out)


def preview(searcher_config: JSONValue, hyperparameters: JSONValue, seed: int) -> Preview:
    """Simulate the search with a seeded random metric; ``ValueError`` names a bad field."""
    searcher = new_searcher(searcher_config, hyperparameters, seed)

    def curve(hparams: JSONObject, t: float, trial_seed: int) -> float:
        return random.Random(f"{seed}:{trial_seed}:{t!r}").random()

    known = searcher.max_time or searcher.config.max_length_units()
    result = simulate(searcher, curve, default_length=1.0)
    trials = tuple(
        PreviewTrial(t.request_id, t.hparams, t.seed, t.trained if known else None,
                     t.stopped_at_rung)
        for t in result.trials
    )  # fmt: skip
    return Preview(
        searcher=searcher.config.name,
        time_metric=searcher.time_metric,
        trials=trials,
        total_length=result.budget if known else None,
        sampler=searcher.config.sampler_name(),
        brackets=_preview_brackets(searcher, result),
    )
