"""The rows of checkpoints and the metrics reported at their steps."""

from __future__ import annotations

import datetime as dt
import uuid as uuidlib

from typing_extensions import TypedDict

from det.common.jsontypes import JSONObject


class Checkpoint(TypedDict):
    """A ``checkpoints`` row with its trial's and experiment's columns and the metrics reported
    at its step (what :func:`get` and :func:`list_for` read; ``schemas.checkpoints`` sends it)."""

    uuid: uuidlib.UUID
    trial_id: int | None
    task_id: str | None
    allocation_id: str | None
    state: str
    report_time: dt.datetime
    #: File sizes by path.
    resources: dict[str, int]
    metadata: JSONObject
    steps_completed: int
    size: int
    storage: JSONObject | None
    experiment_id: int | None
    hparams: JSONObject | None
    #: The experiment's stored config, passed on (redacted) to the wire.
    config: JSONObject | None
    searcher_metric: float | None
    validation: MetricsBody | None
    training: MetricsBody | None


class MetricsBody(TypedDict, total=False):
    """A ``metrics.metrics`` value: the averages a report carried (and its batch metrics)."""

    avg_metrics: JSONObject
    batch_metrics: list[JSONObject]
