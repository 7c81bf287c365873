"""Searcher configs (Determined 0.38): single, random, grid, adaptive_asha, async_halving.

``searcher.name`` picks the model. In 0.38 the ASHA searchers measure time with a metric the
training code reports (``time_metric`` up to ``max_time``); ``max_length`` is deprecated for the
others and no longer drives ASHA. Custom searchers were removed in 0.38, PBT earlier.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer

from det.common.jsontypes import JSONObject, JSONValue

from .base import ConfigModel, Length

SEARCHERS = ("single", "random", "grid", "adaptive_asha", "async_halving")

# name -> why it is refused
REMOVED_SEARCHERS = {
    "custom": "custom searchers (including DeepSpeed Autotune) were removed in 0.38: use one of "
    + ", ".join(SEARCHERS),
    "pbt": "the pbt searcher was removed (deprecated since 0.17.6): use adaptive_asha or random",
    "adaptive": "the adaptive searcher was removed: use adaptive_asha",
    "adaptive_simple": "the adaptive_simple searcher was removed: use adaptive_asha",
    "sync_halving": "the sync_halving searcher was removed: use adaptive_asha",
}

ASHA_MAX_LENGTH_REMOVED = (
    "removed in 0.38 for {name}: use searcher.max_time with searcher.time_metric and report "
    "the time metric with your validation metrics"
)

# det's own (Determined has no such field): "tpe" proposes new trials from the search's
# results (det.master.searcher.tpe); unset means uniform sampling, as in Determined.
Sampler = Literal["random", "tpe"]
UNSET_SAMPLER: Sampler = "random"

# Determined's default number of trials worked on at once for multi-trial searchers (0: no limit).
DEFAULT_MAX_CONCURRENT_TRIALS = 16


class _SearcherBase(ConfigModel):
    metric: str = Field(min_length=1)
    smaller_is_better: bool = True
    source_trial_id: int | None = None
    source_checkpoint_uuid: str | None = None
    # Deprecated in 0.38 (training length now lives in training code); kept for old configs.
    max_length: int | Length | None = None

    @field_validator("max_length")
    @classmethod
    def _positive_length(cls, v: int | Length | None) -> int | Length | None:
        units = v.value if isinstance(v, Length) else v
        if units is not None and units <= 0:
            raise ValueError(f"must be positive, got {units}")
        return v

    def max_length_dict(self) -> JSONValue:
        ml = self.max_length
        return ml.to_dict() if isinstance(ml, Length) else ml

    def max_length_units(self) -> float | None:
        """The deprecated ``max_length``'s number of units (``{batches: 100}``: 100)."""
        ml = self.max_length
        return float(ml.value if isinstance(ml, Length) else ml) if ml is not None else None

    def time_budget(self) -> tuple[str, float] | None:
        """``(time_metric, max_time)`` for the searchers that stop trials by time (ASHA)."""
        return None

    def sampler_name(self) -> Sampler:
        """How new trials' hyperparameters are chosen (det's ``sampler``; unset: random)."""
        return UNSET_SAMPLER


class SingleSearcher(_SearcherBase):
    name: Literal["single"]


class _WithSampler(_SearcherBase):
    sampler: Sampler | None = None

    @model_serializer(mode="wrap")
    def _drop_unset_sampler(self, handler: SerializerFunctionWrapHandler) -> JSONObject:
        """A Determined config dumps back without det's ``sampler`` key."""
        out: JSONObject = handler(self)
        if out.get("sampler") is None:
            out.pop("sampler", None)
        return out

    def sampler_name(self) -> Sampler:
        return self.sampler or UNSET_SAMPLER


class RandomSearcher(_WithSampler):
    name: Literal["random"]
    max_trials: int = Field(ge=1)
    max_concurrent_trials: int = Field(default=DEFAULT_MAX_CONCURRENT_TRIALS, ge=0)


class GridSearcher(_SearcherBase):
    name: Literal["grid"]
    max_concurrent_trials: int = Field(default=DEFAULT_MAX_CONCURRENT_TRIALS, ge=0)


class _AshaBase(_WithSampler):
    KIND: ClassVar[str]  # the subclass's ``name``, for messages
    max_trials: int = Field(ge=1)
    max_concurrent_trials: int = Field(default=DEFAULT_MAX_CONCURRENT_TRIALS, ge=0)
    divisor: float = Field(default=4.0, gt=1)
    time_metric: str | None = None
    max_time: int | None = Field(default=None, ge=1)
    # Deprecated in 0.38: every ASHA search stops trials early instead of promoting them.
    stop_once: bool = False

    def time_budget(self) -> tuple[str, float]:
        """``time_metric`` and ``max_time``, or what the legacy ``max_length: {batches: N}``
        says in their place (the pure searcher still runs such configs; the master's parse
        refuses them, see ``precheck``). ``ValueError`` names the missing field."""
        legacy = self.max_length
        time_metric = self.time_metric or (legacy.unit if isinstance(legacy, Length) else None)
        if not time_metric:
            raise ValueError(f"searcher.time_metric: required for {self.KIND} (e.g. batches)")
        max_time = float(self.max_time) if self.max_time is not None else self.max_length_units()
        if max_time is None:
            raise ValueError(f"searcher.max_time: required for {self.KIND}")
        return time_metric, max_time


class AdaptiveAshaSearcher(_AshaBase):
    KIND: ClassVar[str] = "adaptive_asha"
    name: Literal["adaptive_asha"]
    mode: Literal["aggressive", "standard", "conservative"] = "standard"
    max_rungs: int = Field(default=5, ge=1)
    bracket_rungs: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list)


class AsyncHalvingSearcher(_AshaBase):
    KIND: ClassVar[str] = "async_halving"
    name: Literal["async_halving"]
    num_rungs: int = Field(ge=1)


SearcherConfig = Annotated[
    SingleSearcher | RandomSearcher | GridSearcher | AdaptiveAshaSearcher | AsyncHalvingSearcher,
    Field(discriminator="name"),
]


def precheck(raw: JSONValue) -> list[tuple[str, str]]:
    """Refusals with a better message than a schema error: unknown or removed searchers, and
    ASHA configured the pre-0.38 way."""
    if not isinstance(raw, dict):
        return []
    name = raw.get("name")
    if name is None:
        return [("searcher.name", "required field missing")]
    if not isinstance(name, str):
        return [("searcher.name", f"expected a string (got {name!r})")]
    if name in REMOVED_SEARCHERS:
        return [("searcher.name", REMOVED_SEARCHERS[name])]
    if name not in SEARCHERS:
        return [
            (
                "searcher.name",
                f"unknown searcher '{name}' (expected one of: {', '.join(SEARCHERS)})",
            )
        ]
    problems: list[tuple[str, str]] = []
    if name in ("adaptive_asha", "async_halving"):
        if raw.get("max_length") is not None and raw.get("max_time") is None:
            problems.append(("searcher.max_length", ASHA_MAX_LENGTH_REMOVED.format(name=name)))
        else:
            for field in ("time_metric", "max_time"):
                if raw.get(field) is None:
                    problems.append(
                        (
                            f"searcher.{field}",
                            f"required for {name} (the searcher measures training time with "
                            "searcher.time_metric up to searcher.max_time)",
                        )
                    )
    return problems


def deprecations(s: _SearcherBase) -> list[str]:
    notes: list[str] = []
    if s.max_length is not None:
        notes.append(
            "searcher.max_length is deprecated since 0.38: set the training length in your "
            "training code"
        )
    if isinstance(s, _AshaBase) and s.stop_once:
        notes.append("searcher.stop_once is deprecated since 0.38: ASHA searches always stop early")
    return notes
