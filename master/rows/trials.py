"""The rows of trials and their metric reports."""

from __future__ import annotations

import datetime as dt

from typing_extensions import TypedDict

from det.master.rows.checkpoints import MetricsBody


class BestTrial(TypedDict):
    """An experiment's best trial by its searcher metric (:func:`best_trial`)."""

    id: int
    searcher_metric: float


class MetricRow(TypedDict):
    """A ``metrics`` row: one report of one group."""

    id: int
    trial_id: int
    trial_run_id: int
    metric_group: str
    total_batches: int
    metrics: MetricsBody
    reported_at: dt.datetime
