"""Trials on the wire: ``trialv1Trial`` from a ``trials`` row, metric reports and workloads, and
det's own trial messages (the batched metrics report, a trial's rows as plain JSON)."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, cast

from typing_extensions import TypedDict

from det.master.fastjson import fragment
from det.master.rows.checkpoints import Checkpoint
from det.master.rows.trials import MetricRow, TrialRow
from det.master.schemas import d
from det.master.schemas._types import Int64
from det.master.wire import ts

# The state of an ACTIVE trial's live allocation, shown as Determined's substates.
_SUBSTATE = {
    "PENDING": "QUEUED",
    "ASSIGNED": "QUEUED",
    "PULLING": "PULLING",
    "STARTING": "STARTING",
    "RUNNING": "RUNNING",
    "TERMINATING": "RUNNING",
}


def display_state(state: str, alloc_state: str | None) -> str:
    """The trial's state as Determined shows it (``alloc_state``: its live allocation's)."""
    if state == "ACTIVE" and alloc_state:
        return _SUBSTATE.get(alloc_state, state)
    return state


class Trial(d.trialv1Trial):
    """Determined's trial and det's addition: the checkpoint a restart resumes from (det's CLI
    shows it; Determined's clients ignore the key)."""

    latestCheckpointUuid: NotRequired[str | None]


def checkpoint_workload(c: Checkpoint) -> d.v1CheckpointWorkload:
    """A checkpoint as ``v1CheckpointWorkload``; sizes are int64s, sent as strings."""
    return {
        "uuid": str(c["uuid"]),
        "totalBatches": c["steps_completed"],
        "state": cast("d.checkpointv1State", "STATE_" + c["state"]),
        "endTime": ts(c["report_time"]),
        "resources": {k: str(v) for k, v in (c["resources"] or {}).items()},
        "metadata": c["metadata"] or {},
    }


def trial(row: TrialRow) -> d.trialv1Trial:
    """A trial (det's :class:`Trial`) from its row; the JSON columns, the validations and the
    best checkpoint are text the query built, sent as they are."""
    # Fragments stand for the JSON they hold (typed Any: the wire types name what they hold).
    hparams: Any = fragment(row.hparams_json, "{}")
    summary: Any = fragment(row.summary_metrics_json, "{}")
    latest: Any = fragment(row.latest_validation_json)
    best: Any = fragment(row.best_validation_json)
    best_checkpoint: Any = fragment(row.best_checkpoint_json)
    out: Trial = {
        "id": row.id,
        "experimentId": row.experiment_id,
        "state": cast("d.trialv1State", "STATE_" + display_state(row.state, row.alloc_state)),
        "restarts": row.restarts,
        "startTime": ts(row.created_at) or "",
        "endTime": ts(row.ended_at),
        "hparams": hparams,
        "totalBatchesProcessed": row.steps_completed,
        "searcherMetricValue": row.searcher_metric,
        "summaryMetrics": summary,
        "taskId": row.task_id,
        "taskIds": [row.task_id],
        "runnerState": "",
        "wallClockTime": 0.0,
        "warmStartCheckpointUuid": None,
        "latestCheckpointUuid": str(row.latest_checkpoint) if row.latest_checkpoint else None,
        "metadata": {},
        "latestValidation": latest,
        "bestValidation": best,
        "bestCheckpoint": best_checkpoint,
        "checkpointCount": row.checkpoint_count,
        "totalCheckpointSize": str(row.checkpoint_size),
    }
    return out


def metrics_report(r: MetricRow) -> d.v1MetricsReport:
    """A ``metrics`` row as stored: the values under ``avg_metrics`` (and ``batch_metrics``)."""
    return {
        "id": r["id"],
        "trialId": r["trial_id"],
        "trialRunId": r["trial_run_id"],
        "totalBatches": r["total_batches"],
        "endTime": ts(r["reported_at"]) or "",
        "metrics": dict(r["metrics"]),
        "group": r["metric_group"],
        "archived": False,
    }


def wire_report(r: MetricRow) -> d.v1MetricsReport:
    """A ``metrics`` row as Determined's metric streams send it: a validation's values sit under
    ``validation_metrics`` (its clients read them there), every other group's under
    ``avg_metrics``."""
    out = metrics_report(r)
    if out["group"] == "validation":
        metrics = dict(out["metrics"])
        metrics["validation_metrics"] = metrics.pop("avg_metrics", {})
        out["metrics"] = metrics
    return out


def workloads(
    reports: list[MetricRow], checkpoints: list[Checkpoint], *, batch_metrics: bool
) -> list[d.v1WorkloadContainer]:
    """A trial's training, validation and checkpoint workloads in training order (``reports``:
    its ``metrics`` rows; ``checkpoints``: its ``checkpoints`` rows)."""
    items: list[tuple[int, int, d.v1WorkloadContainer]] = []
    for m in reports:
        group = m["metric_group"]
        if group not in ("training", "validation"):
            continue
        metrics: d.v1Metrics = {"avgMetrics": m["metrics"].get("avg_metrics") or {}}
        if batch_metrics and m["metrics"].get("batch_metrics"):
            metrics["batchMetrics"] = m["metrics"]["batch_metrics"]
        w: d.v1MetricsWorkload = {
            "totalBatches": m["total_batches"],
            "endTime": ts(m["reported_at"]),
            "metrics": metrics,
            "numInputs": 0,
        }
        if group == "training":
            items.append((m["total_batches"], 0, {"training": w}))
        else:
            items.append((m["total_batches"], 1, {"validation": w}))
    for c in checkpoints:
        workload = checkpoint_workload(c)
        items.append((c["steps_completed"], 2, {"checkpoint": workload}))
    items.sort(key=lambda x: (x[0], x[1]))
    return [w for _, _, w in items]


# --- det's own messages -----------------------------------------------------------------------


class MetricsReportEntry(TypedDict, total=False):
    """One report of det's batched metrics request (a ``v1TrialMetrics`` with its group)."""

    group: str
    trialRunId: Int64
    stepsCompleted: Int64 | None
    metrics: d.v1Metrics


class ReportMetricsBatchRequest(TypedDict, total=False):
    """``POST /api/v1/trials/{id}/metrics/batch`` (det's harness): many reports, one request."""

    reports: list[MetricsReportEntry]


class ReportMetricsBatchResponse(TypedDict):
    rows: int


class TrialMetricsParams(TypedDict, total=False):
    """``GET /api/v1/trials/{id}/metrics``: one group's rows, or all."""

    group: str


class TrialMetricsResponse(TypedDict):
    """A trial's reported rows as stored (det's non-streaming convenience)."""

    metrics: list[d.v1MetricsReport]


# The reasons det's harness reports (Determined's and det's own), with or without the prefix.
EarlyExitReason = Literal[
    "EXITED_REASON_INVALID_HP",
    "EXITED_REASON_INIT_INVALID_HP",
    "EXITED_REASON_USER_REQUESTED_STOP",
    "EXITED_REASON_ERRORED",
    "EXITED_REASON_USER_CANCELED",
    "INVALID_HP",
    "INIT_INVALID_HP",
    "USER_REQUESTED_STOP",
    "ERRORED",
    "USER_CANCELED",
]


class TrialEarlyExit(TypedDict, total=False):
    """Determined's ``v1TrialEarlyExit`` with the reasons det's harness also reports."""

    reason: EarlyExitReason
