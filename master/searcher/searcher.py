"""The ``Searcher`` facade: one per experiment; see the package docstring for the contract."""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Mapping
from typing import NotRequired

from pydantic import TypeAdapter
from typing_extensions import TypedDict

from det.common.jsontypes import JSONObject, JSONValue

from .actions import Action, CreateTrial, ExitedReason, Shutdown, StopTrial
from .asha import AdaptiveASHA, bracket_rungs, new_async_halving, rung_times
from .base import RngState, SearchContext, SearchMethod, load_state
from .basic import GridSearch, RandomSearch
from .config import (
    AdaptiveAshaSearcher,
    AsyncHalvingSearcher,
    GridSearcher,
    SearcherConfig,
    SingleSearcher,
    parse_searcher_config,
)
from .hparams import parse_hyperparameters
from .tpe import TPESampler

logger = logging.getLogger(__name__)

SNAPSHOT_VERSION = 1
COMPLETED = "COMPLETED"


class Snapshot(TypedDict):
    """``Searcher.snapshot()``, as ``Searcher.restore`` reads it back."""

    version: int
    searcher: JSONObject
    hyperparameters: JSONObject
    seed: int
    rng: RngState
    initialized: bool
    shutdown: bool
    requested: list[tuple[str, JSONObject, int]]  # (request id, hparams, trial seed)
    created: list[str]
    stopped: list[str]
    exited: dict[str, str]
    method: JSONObject
    sampler: NotRequired[JSONObject]


_SNAPSHOT = TypeAdapter(Snapshot)


class Searcher:
    """Events in, actions out. Not thread-safe: the master calls it under its experiment lock."""

    def __init__(
        self,
        config: SearcherConfig,
        method: SearchMethod,
        ctx: SearchContext,
        *,
        raw_config: JSONObject,
        raw_hyperparameters: JSONObject | None,
        seed: int,
    ) -> None:
        self.config = config
        budget = config.time_budget()
        # The ASHA searchers' ``time_metric`` and ``max_time``; None for the others.
        self.time_metric: str | None = budget[0] if budget is not None else None
        self.max_time: float | None = budget[1] if budget is not None else None
        self.method = method
        self.ctx = ctx
        self._raw_config = copy.deepcopy(raw_config)
        self._raw_hparams = copy.deepcopy(raw_hyperparameters or {})
        self.seed = seed
        self.initialized = False
        self.shutdown = False
        self.requested: dict[str, CreateTrial] = {}
        self.created: set[str] = set()
        self.stopped: set[str] = set()
        self.exited: dict[str, str] = {}  # request id -> COMPLETED or an ExitedReason value

    # -- bookkeeping ---------------------------------------------------------------------

    def _known(self, request_id: str) -> None:
        if request_id not in self.requested:
            raise ValueError(f"unknown trial request id {request_id!r}")

    def _record(self, actions: list[Action]) -> list[Action]:
        for action in actions:
            if isinstance(action, CreateTrial):
                self.requested[action.request_id] = action
            elif isinstance(action, StopTrial):
                self.stopped.add(action.request_id)
        if actions:
            logger.debug("searcher actions: %s", actions)
        return actions

    def _after_exit(self, actions: list[Action]) -> list[Action]:
        actions = self._record(actions)
        if not self.shutdown and all(r in self.exited for r in self.requested):
            self.shutdown = True
            failure = all(v == ExitedReason.ERRORED.value for v in self.exited.values())
            actions.append(Shutdown(failure=failure))
            logger.info("search finished after %d trials (failure=%s)", len(self.exited), failure)
        return actions

    # -- events --------------------------------------------------------------------------

    def initial_trials(self) -> list[Action]:
        if self.initialized:
            raise RuntimeError("initial_trials() was already called for this search")
        self.initialized = True
        return self._record(self.method.initial_trials())

    def trial_created(self, request_id: str) -> list[Action]:
        self._known(request_id)
        if request_id in self.created:
            return []
        self.created.add(request_id)
        return self._record(self.method.trial_created(request_id))

    def validation_completed(
        self, request_id: str, metric: float, time_value: float
    ) -> list[Action]:
        """``metric``: the validation's searcher metric; ``time_value``: the trial's
        ``time_metric`` at that point. Ignored once the trial is stopped or has exited."""
        self._known(request_id)
        if request_id in self.exited or request_id in self.stopped:
            return []
        loss = float(metric) if self.config.smaller_is_better else -float(metric)
        if math.isnan(loss):
            loss = math.inf
        if self.ctx.sampler is not None:
            self.ctx.sampler.observe(request_id, loss, float(time_value))
        return self._record(self.method.validation_completed(request_id, loss, float(time_value)))

    def validation_metrics(self, request_id: str, metrics: JSONObject) -> list[Action]:
        """``validation_completed`` from a trial's reported validation metrics dict.

        Reads ``searcher.metric`` and, for the ASHA searchers, ``searcher.time_metric`` (the other
        searchers do not need it). ``ValueError`` names a missing or non-numeric one.
        """
        metric = _number_in(metrics, self.config.metric)
        time_metric = self.time_metric
        time_value = 0.0 if time_metric is None else _number_in(metrics, time_metric)
        return self.validation_completed(request_id, metric, time_value)

    def trial_exited(self, request_id: str) -> list[Action]:
        """The trial ended COMPLETED (including a searcher stop). Repeats are no-ops."""
        self._known(request_id)
        if request_id in self.exited:
            return []
        self.exited[request_id] = COMPLETED
        return self._after_exit(self.method.trial_exited(request_id))

    def trial_exited_early(self, request_id: str, reason: ExitedReason) -> list[Action]:
        """The trial ended abnormally. Call it instead of ``trial_exited``; a later
        ``trial_exited`` for the same trial is a no-op."""
        self._known(request_id)
        if request_id in self.exited:
            return []
        self.exited[request_id] = ExitedReason(reason).value
        if self.ctx.sampler is not None and ExitedReason(reason) is ExitedReason.INVALID_HP:
            self.ctx.sampler.forget(request_id)
        return self._after_exit(self.method.trial_exited_early(request_id, ExitedReason(reason)))

    # -- queries -------------------------------------------------------------------------

    def progress(self, reported: Mapping[str, float] | None = None) -> float:
        """The search's progress in [0, 1] (1 once it shut down). ``reported``: the training
        progress (fraction of its length) trials last reported, by request id; those of trials
        that exited or that this search never requested are ignored."""
        if self.shutdown:
            return 1.0
        running = {
            rid: float(f)
            for rid, f in (reported or {}).items()
            if rid in self.requested and rid not in self.exited and math.isfinite(f)
        }
        return min(max(self.method.progress(running), 0.0), 1.0)

    def trial_target_length(self, request_id: str) -> float | None:
        """How far (in ``time_metric`` units) the trial is meant to train.

        ``async_halving``/``adaptive_asha``: ``max_time``; a stopping-based ASHA trial aims for the
        full length and is stopped early by a ``StopTrial``. ``single``/``random``/``grid``: the
        deprecated ``max_length`` units if the config has one, else ``None`` (the training code
        decides). ``None`` for an unknown request id.
        """
        if request_id not in self.requested:
            return None
        return self.method.target_length(request_id)

    def trials(self) -> list[CreateTrial]:
        """Every trial requested so far, in request order."""
        return list(self.requested.values())

    # -- persistence ---------------------------------------------------------------------

    def snapshot(self) -> JSONObject:
        """A JSON-serialisable dict (config, seed, RNG state, bookkeeping, method state, and the
        ``tpe`` sampler's observations when the search has one): a ``Snapshot``."""
        state: JSONObject = {
            "version": SNAPSHOT_VERSION,
            "searcher": copy.deepcopy(self._raw_config),
            "hyperparameters": copy.deepcopy(self._raw_hparams),
            "seed": self.seed,
            "rng": self.ctx.rng_state(),
            "initialized": self.initialized,
            "shutdown": self.shutdown,
            "requested": [
                [c.request_id, copy.deepcopy(c.hparams), c.seed] for c in self.requested.values()
            ],
            "created": [r for r in sorted(self.created)],
            "stopped": [r for r in sorted(self.stopped)],
            "exited": {r: why for r, why in self.exited.items()},
            "method": self.method.snapshot(),
        }
        if self.ctx.sampler is not None:
            state["sampler"] = self.ctx.sampler.snapshot()
        return state

    @classmethod
    def restore(cls, raw: JSONValue) -> Searcher:
        """Rebuild a searcher that makes exactly the decisions the snapshotted one would have."""
        version = raw.get("version") if isinstance(raw, dict) else None
        if version != SNAPSHOT_VERSION:
            raise ValueError(f"unsupported searcher snapshot version {version!r}")
        snapshot = load_state(_SNAPSHOT, raw, "searcher")
        searcher = new_searcher(snapshot["searcher"], snapshot["hyperparameters"], snapshot["seed"])
        searcher.ctx.load_rng_state(snapshot["rng"])
        searcher.initialized = snapshot["initialized"]
        searcher.shutdown = snapshot["shutdown"]
        searcher.requested = {
            rid: CreateTrial(rid, hp, seed) for rid, hp, seed in snapshot["requested"]
        }
        searcher.created = set(snapshot["created"])
        searcher.stopped = set(snapshot["stopped"])
        searcher.exited = snapshot["exited"]
        searcher.method.restore(snapshot["method"])
        if searcher.ctx.sampler is not None and "sampler" in snapshot:
            searcher.ctx.sampler.restore(snapshot["sampler"])
        return searcher


def _number_in(metrics: JSONObject, name: str) -> float:
    value = metrics.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(
            f"validation metrics must include a number for {name!r} (got {value!r}); "
            f"reported: {sorted(metrics)}"
        )
    return float(value)


def _level_times(config: SearcherConfig) -> list[float]:
    """The rung times every bracket shares (``max_time / divisor ** k``): what a ``tpe`` sampler
    ranks trials by before their loss. None for random search (every trial is judged by its
    loss alone)."""
    if isinstance(config, AsyncHalvingSearcher):
        count = config.num_rungs
    elif isinstance(config, AdaptiveAshaSearcher):
        count = max(bracket_rungs(config))
    else:
        return []
    return rung_times(count, config.divisor, config.time_budget()[1])


def new_searcher(searcher_config: JSONValue, hyperparameters: JSONValue, seed: int) -> Searcher:
    """Build the searcher for an experiment's ``searcher:`` and ``hyperparameters:`` sections.

    Raises ``ValueError`` naming the offending field. Same arguments ⇒ same trials.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed: must be an integer, got {seed!r}")
    config = parse_searcher_config(searcher_config)
    space = parse_hyperparameters(hyperparameters)
    sampler = TPESampler(space, _level_times(config)) if config.sampler_name() == "tpe" else None
    ctx = SearchContext(space, seed, sampler)
    method: SearchMethod
    if isinstance(config, GridSearcher):
        method = GridSearch(ctx, config.max_concurrent_trials, config.max_length_units())
    elif isinstance(config, AsyncHalvingSearcher):
        method = new_async_halving(ctx, config)
    elif isinstance(config, AdaptiveAshaSearcher):
        method = AdaptiveASHA(ctx, config)
    elif isinstance(config, SingleSearcher):
        method = RandomSearch(ctx, 1, 1, config.max_length_units())
    else:
        method = RandomSearch(
            ctx, config.max_trials, config.max_concurrent_trials, config.max_length_units()
        )
    assert isinstance(searcher_config, dict)  # parse_searcher_config checked it
    return Searcher(
        config,
        method,
        ctx,
        raw_config=searcher_config,
        raw_hyperparameters=hyperparameters if isinstance(hyperparameters, dict) else None,
        seed=seed,
    )
