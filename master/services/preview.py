"""Determined's ``PreviewHPSearch`` (``det preview-search``): the trials a config's searcher
would create and how long each trains, from the pure searcher's offline preview; and det's
additions to the summary: the sampler and, for the ASHA searchers, each bracket's rungs with how
many trials reach them."""

from __future__ import annotations

import json
from typing import Any

from det.master.errors import InvalidArgument
from det.master.handles import MasterState
from det.master.schemas import d
from det.master.schemas.preview import PreviewBracket, SearchSummary
from det.master.searcher.simulate import preview
from det.master.services.experiments import parse_config
from det.master.services.searching import experiment_seed


def preview_search(st: MasterState, config: Any) -> d.v1PreviewHPSearchResponse:
    """``v1PreviewHPSearchResponse`` for ``config`` (an experiment config object)."""
    if not isinstance(config, dict):
        raise InvalidArgument("config: required object (an experiment config)")
    cfg = parse_config(st, json.dumps(config))
    resolved = cfg.to_dict()
    searcher = resolved["searcher"]
    assert isinstance(searcher, dict)  # the model dumps its searcher as a mapping
    try:
        result = preview(
            searcher,
            resolved.get("hyperparameters") or {},
            experiment_seed(cfg),
        )
    except ValueError as e:
        raise InvalidArgument(f"invalid experiment config: {e}") from None
    unit = result.time_metric or "batches"
    trials: list[d.v1TrialSummary] = [
        {
            "count": count,
            "unit": (
                {"maxLength": True}
                if length is None
                else {"name": unit, "value": int(length), "maxLength": False}
            ),
        }
        for length, count in result.length_counts()
    ]
    brackets: list[PreviewBracket] = [
        {
            "trials": b.trials,
            "rungs": [{"length": r.length, "trials": r.trials} for r in b.rungs],
        }
        for b in result.brackets
    ]
    summary: SearchSummary = {
        "config": searcher,
        "trials": trials,
        "sampler": result.sampler,
        "timeMetric": result.time_metric,
        "brackets": brackets,
    }
    return {"summary": summary}
