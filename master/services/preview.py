"""Determined's ``PreviewHPSearch`` (``det preview-search``): the trials a config's searcher
would create and how long each trains, from the pure searcher's offline preview."""

from __future__ import annotations

import json
from typing import Any

from det.master.errors import InvalidArgument
from det.master.schemas import d
from det.master.searcher.simulate import preview
from det.master.services.experiments import parse_config
from det.master.state import MasterState


def preview_search(st: MasterState, config: Any) -> d.v1PreviewHPSearchResponse:
    """``v1PreviewHPSearchResponse`` for ``config`` (an experiment config object)."""
    if not isinstance(config, dict):
        raise InvalidArgument("config: required object (an experiment config)")
    resolved = parse_config(st, json.dumps(config))
    try:
        result = preview(
            resolved["searcher"],
            resolved.get("hyperparameters") or {},
            int(resolved["reproducibility"]["experiment_seed"]),
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
    return {"summary": {"config": resolved["searcher"], "trials": trials}}
