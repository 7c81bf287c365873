"""``searcher.operations()`` with Determined 0.38 semantics.

In 0.38 the master no longer hands out operations: ``operations()`` yields exactly one
operation whose ``length`` is ``searcher.max_length`` from the experiment config (an int, or
``{unit: n}``). ``op.report_progress(n)`` posts ``n / length`` as the trial's progress;
``op.report_completed(metric)`` only marks the op done (the searcher learns the metric from the
validation metrics). The trial is finished when the script exits 0. Workers follow the chief
through broadcasts, in step. Without ``max_length`` in the config, calling ``operations()``
raises (training length belongs in the training code). ``operations()`` warns FutureWarning,
as 0.38 does.
"""

from __future__ import annotations

import enum
import logging
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..common.api import Session
from ._distributed import DistributedContext

# The task side's Python has no typing_extensions: the JSON types are for mypy only.
if TYPE_CHECKING:
    from ..common.jsontypes import JSONObject

logger = logging.getLogger(__name__)

_DEPRECATED = (
    "SearcherContext.operations() is deprecated (as in Determined 0.38): set the training "
    "length in your training code instead."
)


class Unit(enum.Enum):
    EPOCHS = "EPOCHS"
    RECORDS = "RECORDS"
    BATCHES = "BATCHES"


class SearcherMode(enum.Enum):
    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"


def _searcher(config: JSONObject) -> JSONObject:
    block = config.get("searcher")
    return block if isinstance(block, dict) else {}


def parse_max_length(config: JSONObject) -> int | None:
    """``searcher.max_length`` as an int (``{batches: 100}`` → 100), or None (pure)."""
    ml = _searcher(config).get("max_length")
    if isinstance(ml, dict):
        values = list(ml.values())
        ml = values[0] if values else None
    if ml is None:
        return None
    if isinstance(ml, (int, float, str)):
        return int(ml)
    raise ValueError(f"searcher.max_length: expected a number, not {type(ml).__name__}")


def parse_units(config: JSONObject) -> Unit | None:
    searcher = _searcher(config)
    names = {"records": Unit.RECORDS, "epochs": Unit.EPOCHS, "batches": Unit.BATCHES}
    if "unit" in searcher:
        unit = searcher["unit"]
        return names.get(unit) if isinstance(unit, str) else None
    ml = searcher.get("max_length")
    if isinstance(ml, dict) and len(ml) == 1:
        return names.get(next(iter(ml)))
    return None


class SearcherOperation:
    def __init__(self, session: Session | None, trial_id: int, length: int, is_chief: bool) -> None:
        self._session = session
        self._trial_id = trial_id
        self._length = length
        self._is_chief = is_chief
        self._completed = False

    @property
    def length(self) -> int:
        """The total training (in the user's unit) to reach before validating."""
        return self._length

    def report_progress(self, length: float) -> None:
        if not self._is_chief:
            raise RuntimeError("only the chief may call op.report_progress()")
        if self._completed and length != self._length:
            raise RuntimeError("op.report_progress() after op.report_completed()")
        progress = min(1.0, max(0.0, length / self._length)) if self._length else 1.0
        if self._session is None:
            logger.info("progress: %s/%s", length, self._length)
            return
        self._session.post(
            f"/api/v1/trials/{self._trial_id}/progress",
            json={"progress": progress, "is_raw": True},
        )

    def report_completed(self, searcher_metric: Any) -> None:
        if not self._is_chief:
            raise RuntimeError("only the chief may call op.report_completed()")
        if self._completed:
            raise RuntimeError("op.report_completed() may only be called once")
        self._completed = True
        logger.info("searcher operation completed: searcher_metric=%s", searcher_metric)


class SearcherContext:
    def __init__(
        self,
        session: Session | None,
        dist: DistributedContext,
        trial_id: int,
        max_length: int | None,
        units: Unit | None = None,
    ) -> None:
        self._session = session
        self._dist = dist
        self._trial_id = trial_id
        self._length = max_length
        self._units = units

    def operations(
        self, searcher_mode: SearcherMode = SearcherMode.WorkersAskChief, auto_ack: bool = True
    ) -> Iterator[SearcherOperation]:
        warnings.warn(_DEPRECATED, FutureWarning, stacklevel=2)
        if self._length is None:
            raise ValueError(
                "searcher.operations() needs searcher.max_length in the experiment config; "
                "set the training length in your training code instead"
            )
        mode = SearcherMode(searcher_mode)
        if self._dist.rank == 0:
            op = SearcherOperation(self._session, self._trial_id, self._length, True)
            if mode == SearcherMode.WorkersAskChief:
                self._dist.broadcast(op.length)
            yield op
            if not op._completed:
                raise RuntimeError("you must call op.report_completed() on each operation")
            if mode == SearcherMode.WorkersAskChief:
                self._dist.broadcast(None)
            return
        if mode != SearcherMode.WorkersAskChief:
            raise RuntimeError("only the chief may call operations(searcher_mode=ChiefOnly)")
        while True:
            length = self._dist.broadcast(None)
            if length is None:
                return
            yield SearcherOperation(self._session, self._trial_id, int(length), False)

    def acknowledge_out_of_ops(self) -> None:
        """Ignored, as in 0.38."""

    def get_configured_units(self) -> Unit | None:
        return self._units


class DummySearcherContext(SearcherContext):
    """Off-cluster: one operation of ``length`` (default 1), progress logged."""

    def __init__(self, dist: DistributedContext, length: int = 1) -> None:
        super().__init__(None, dist, 0, length, Unit.EPOCHS)
