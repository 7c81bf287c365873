"""The internal search-method interface and the shared, seeded source of new trials.

Search methods see the searcher metric already turned into a *loss* (smaller is better; NaN is
the worst value), and are told about each trial's end exactly once; the ``Searcher`` facade
does that bookkeeping. Every method can dump its state to a JSON-able dict and load it back.
"""

from __future__ import annotations

import abc
import copy
import math
import random
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

from pydantic import TypeAdapter, ValidationError

from det.common.jsontypes import JSONObject, JSONValue

from .actions import Action, CreateTrial, ExitedReason
from .hparams import HParamSpace, sample_all

if TYPE_CHECKING:
    from .tpe import TPESampler


class SearchContext:
    """The one seeded RNG of a search: hyperparameter samples, request ids and trial seeds.

    All draws come from this RNG in the order the search asks for them, so the same config and
    experiment seed give the same trials, and restoring the RNG state continues the sequence.
    """

    def __init__(self, space: HParamSpace, seed: int, sampler: TPESampler | None = None) -> None:
        self.space = space
        self.rng = random.Random(seed)
        # ``sampler: tpe`` (det's own); None: uniform sampling, as in Determined.
        self.sampler = sampler

    def create(self, hparams: JSONObject | None = None) -> CreateTrial:
        """A new trial: sampled hparams unless given, then a request id, then a trial seed."""
        if hparams is not None:
            hparams = copy.deepcopy(hparams)
        elif self.sampler is not None:
            hparams = self.sampler.suggest(self.rng)
        else:
            hparams = sample_all(self.space, self.rng)
        request_id = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        if self.sampler is not None:
            self.sampler.created(request_id, hparams)
        # Trial seeds fit a signed 32-bit column, like Determined's.
        return CreateTrial(request_id, hparams, self.rng.randrange(2**31))

    def rng_state(self) -> JSONValue:
        version, internal, gauss_next = self.rng.getstate()
        return [version, [v for v in internal], gauss_next]

    def load_rng_state(self, state: RngState) -> None:
        version, internal, gauss_next = state
        self.rng.setstate((version, tuple(internal), gauss_next))


#: ``random.Random.getstate()`` as a snapshot stores it: (version, internal state, gauss_next).
RngState = tuple[int, list[int], float | None]

_T = TypeVar("_T")


def load_state(adapter: TypeAdapter[_T], state: JSONValue, what: str) -> _T:
    """A snapshot's part, validated into its typed shape (``ValueError`` names what is wrong)."""
    try:
        return adapter.validate_python(state)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        message = f"searcher snapshot: {what}{'.' if where else ''}{where}: {first['msg']}"
        raise ValueError(message) from None


def encode_float(value: float) -> float | str:
    """JSON (and PostgreSQL JSONB) have no infinities: spell them as strings."""
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def decode_float(value: float | str) -> float:
    return float(value)


class SearchMethod(abc.ABC):
    """One search algorithm. Returned actions never include ``Shutdown`` (the facade adds it)."""

    def __init__(self, ctx: SearchContext) -> None:
        self.ctx = ctx

    @abc.abstractmethod
    def initial_trials(self) -> list[Action]: ...

    def trial_created(self, request_id: str) -> list[Action]:
        return []

    @abc.abstractmethod
    def validation_completed(self, request_id: str, loss: float, time_value: float) -> list[Action]:
        """``loss`` is the searcher metric oriented so that smaller is better."""

    @abc.abstractmethod
    def trial_exited(self, request_id: str) -> list[Action]:
        """The trial ended normally (trained to its end, or stopped by the searcher)."""

    @abc.abstractmethod
    def trial_exited_early(self, request_id: str, reason: ExitedReason) -> list[Action]: ...

    @abc.abstractmethod
    def progress(self, running: Mapping[str, float]) -> float:
        """Search progress in [0, 1] (before the facade's clamp). ``running``: the training
        progress (a fraction of its length, in [0, 1]) each trial that has not exited reported,
        by request id; a trial that reported none is absent (0)."""

    def target_length(self, request_id: str) -> float | None:
        return None

    @abc.abstractmethod
    def snapshot(self) -> JSONObject:
        """JSON-able state; the shared RNG is saved separately, by the facade."""

    @abc.abstractmethod
    def restore(self, state: JSONValue) -> None:
        """Load ``snapshot()`` output into a method freshly built from the same config."""
