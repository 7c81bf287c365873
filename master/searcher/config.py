"""The ``searcher:`` section as the search methods read it: the experiment config's own model.

There is one searcher config model, ``det.master.expconf.searcher``'s (Determined 0.38's fields
and defaults: ``smaller_is_better: true``, ``max_concurrent_trials: 16``, ``divisor: 4``,
``mode: standard``, ``max_rungs: 5``). ``parse_searcher_config`` validates a plain dict with it (a
stored config's section, a snapshot's, a test's) and turns the first error into
``ValueError("searcher.<field>: <reason>")``. Null values mean "the default", as in a dumped
config.

What the search methods need beyond the fields is on the model: ``time_budget()`` (the ASHA
searchers' ``time_metric`` and ``max_time``; the legacy ``max_length: {batches: N}`` still works
in their place here, though the master's parse refuses it), ``max_length_units()`` (the
deprecated ``max_length``, reported as the other searchers' target length) and
``sampler_name()`` (det's ``sampler``, ``random`` or ``tpe``; unset: ``random``, as in
Determined). ``max_concurrent_trials: 0`` means no limit; for ``async_halving`` it means
``divisor ** (num_rungs - 1)`` capped by ``max_trials``, for ``adaptive_asha`` see
``asha.bracket_max_concurrent``.
"""

from __future__ import annotations

from pydantic import TypeAdapter, ValidationError

from det.common.jsontypes import JSONValue
from det.master.expconf.searcher import (
    SEARCHERS,
    AdaptiveAshaSearcher,
    AsyncHalvingSearcher,
    GridSearcher,
    RandomSearcher,
    SearcherConfig,
    SingleSearcher,
)

__all__ = [
    "AdaptiveAshaSearcher",
    "AsyncHalvingSearcher",
    "GridSearcher",
    "RandomSearcher",
    "SearcherConfig",
    "SingleSearcher",
    "parse_searcher_config",
]

_ADAPTER: TypeAdapter[
    SingleSearcher | RandomSearcher | GridSearcher | AdaptiveAshaSearcher | AsyncHalvingSearcher
] = TypeAdapter(SearcherConfig)


def _message(error: ValidationError, raw: dict[str, JSONValue]) -> str:
    first = error.errors()[0]
    if first["type"] == "union_tag_not_found":
        return "searcher.name: required"
    if first["type"] == "union_tag_invalid":
        return f"searcher.name: must be one of {', '.join(SEARCHERS)}, got {raw.get('name')!r}"
    # The first part of the location is the union's tag (the searcher's name).
    where = ".".join(str(p) for p in first["loc"][1:])
    reason = "required" if first["type"] == "missing" else first["msg"]
    return f"searcher.{where}: {reason}" if where else f"searcher: {reason}"


def parse_searcher_config(raw: JSONValue) -> SearcherConfig:
    """The ``searcher:`` section validated into its model (``ValueError`` names the field)."""
    if not isinstance(raw, dict):
        raise ValueError("searcher: must be a mapping")
    try:
        config = _ADAPTER.validate_python(raw)
    except ValidationError as e:
        raise ValueError(_message(e, raw)) from None
    config.time_budget()  # the ASHA searchers: refuse a config that gives no time budget
    return config
