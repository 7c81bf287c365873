"""``det preview-search`` on the wire: Determined's search summary and det's additions (the
sampler and the ASHA rungs; Determined's clients ignore the keys they do not know)."""

from __future__ import annotations

from typing import NotRequired

from typing_extensions import TypedDict

from det.master.schemas import d


class PreviewRung(TypedDict):
    length: float  # units of the time metric trained when a trial is ranked at the rung
    trials: int  # how many of the bracket's trials reach the rung


class PreviewBracket(TypedDict):
    trials: int
    rungs: list[PreviewRung]


class SearchSummary(d.v1SearchSummary):
    """Determined's summary plus det's: how new trials' hyperparameters are chosen (``random``:
    uniformly, as in Determined; ``tpe``) and, for the ASHA searchers, each bracket's rungs."""

    sampler: NotRequired[str]
    timeMetric: NotRequired[str | None]
    brackets: NotRequired[list[PreviewBracket]]
