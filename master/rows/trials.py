"""The rows of trials and their metric reports."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from typing_extensions import TypedDict

from det.common.jsontypes import JSONObject
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


@dataclass(frozen=True, slots=True)
class TrialRow:
    """A trial as ``trialv1Trial`` sends it (``services.trials.list_for_experiment``): its
    columns, its live allocation's state, and the summary the query builds. The JSON columns
    and the validations and best checkpoint (each built by PostgreSQL as its wire message) are
    text, passed through (``det.master.fastjson.fragment``)."""

    id: int
    experiment_id: int
    state: str
    restarts: int
    created_at: dt.datetime
    ended_at: dt.datetime | None
    hparams_json: str
    steps_completed: int
    searcher_metric: float | None
    summary_metrics_json: str
    task_id: str
    latest_checkpoint: uuid.UUID | None
    #: The state of the trial's live allocation (None without one).
    alloc_state: str | None
    #: ``v1MetricsWorkload`` of the latest validation, and its value of the searcher metric.
    latest_validation_json: str | None
    latest_value: float | None
    #: ``v1MetricsWorkload`` of the best validation, and its value of the searcher metric.
    best_validation_json: str | None
    best_value: float | None
    #: ``v1CheckpointWorkload`` of the best checkpoint.
    best_checkpoint_json: str | None
    #: The completed checkpoints: how many, and their bytes.
    checkpoint_count: int
    checkpoint_size: int


@dataclass(frozen=True, slots=True)
class VersionedTrial(TrialRow):
    """A :class:`TrialRow` with the row's ``xmin``, which every update of it (every metric
    report) changes (``services.trials.basic``)."""

    row_version: int


@dataclass(frozen=True, slots=True)
class TrialDetail(TrialRow):
    """A :class:`TrialRow` with what one trial's readers also need (``services.trials.get``):
    its searcher request and its experiment's config as stored."""

    request_id: str
    config: JSONObject


@dataclass(frozen=True, slots=True)
class TrialState:
    """A trial's state and its experiment (``states.unmanaged_trial``: the experiment follows)."""

    state: str
    experiment_id: int
