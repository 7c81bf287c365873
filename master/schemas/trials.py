"""Trials on the wire: ``trialv1Trial`` from a ``trials`` row, metric reports and workloads, and
det's own trial messages (the batched metrics report, a trial's rows as plain JSON)."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, cast

from typing_extensions import TypedDict

from det.master.fastjson import fragment
from det.master.rows.checkpoints import Checkpoint
from det.master.rows.trials import MetricRow
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


def display_state(row: dict[str, Any]) -> str:
    """The trial's state as Determined shows it (``alloc_state``: its live allocation's)."""
    state = str(row["state"])
    if state == "ACTIVE" and row.get("alloc_state"):
        return _SUBSTATE.get(str(row["alloc_state"]), state)
    return state


class Trial(d.trialv1Trial):
    """Determined's trial and det's addition: the checkpoint a restart resumes from (det's CLI
    shows it; Determined's clients ignore the key)."""

    latestCheckpointUuid: NotRequired[str | None]


def metrics_workload(w: dict[str, Any] | None) -> d.v1MetricsWorkload | None:
    """A validation as ``v1MetricsWorkload`` from the JSON the trial query builds (or None)."""
    if w is None:
        return None
    return {
        "totalBatches": int(w.get("totalBatches") or 0),
        "numInputs": int(w.get("numInputs") or 0),
        "endTime": w.get("endTime"),
        "metrics": {"avgMetrics": (w.get("metrics") or {}).get("avgMetrics") or {}},
    }


def checkpoint_workload(c: dict[str, Any] | None) -> d.v1CheckpointWorkload | None:
    """A checkpoint as ``v1CheckpointWorkload`` from the JSON the trial query builds (or None);
    sizes are int64s, sent as strings."""
    if c is None:
        return None
    return {
        "uuid": str(c["uuid"]),
        "totalBatches": int(c.get("totalBatches") or 0),
        "state": cast("d.checkpointv1State", c["state"]),
        "endTime": c.get("endTime"),
        "resources": {k: str(v) for k, v in (c.get("resources") or {}).items()},
        "metadata": c.get("metadata") or {},
    }


def trial(row: dict[str, Any]) -> d.trialv1Trial:
    """``row`` is a row of ``services.trials.get`` or ``list_for_experiment`` (det's
    :class:`Trial`); the latter's JSON columns are text, sent as they are."""
    if "hparams_json" in row:
        hparams: Any = fragment(row["hparams_json"], "{}")
        summary: Any = fragment(row["summary_metrics_json"], "{}")
    else:
        hparams, summary = row["hparams"] or {}, row["summary_metrics"] or {}
    if "best_validation_json" in row:  # built by the query as the wire's messages
        latest: Any = fragment(row["latest_validation_json"])
        best: Any = fragment(row["best_validation_json"])
        best_checkpoint: Any = fragment(row["best_checkpoint_json"])
    else:
        latest = metrics_workload(row.get("latest_validation"))
        best = metrics_workload(row.get("best_validation"))
        best_checkpoint = checkpoint_workload(row.get("best_checkpoint"))
    out: Trial = {
        "id": row["id"],
        "experimentId": row["experiment_id"],
        "state": cast("d.trialv1State", "STATE_" + display_state(row)),
        "restarts": row["restarts"],
        "startTime": ts(row["created_at"]) or "",
        "endTime": ts(row["ended_at"]),
        "hparams": hparams,
        "totalBatchesProcessed": row["steps_completed"],
        "searcherMetricValue": row["searcher_metric"],
        "summaryMetrics": summary,
        "taskId": row["task_id"],
        "taskIds": [row["task_id"]],
        "runnerState": "",
        "wallClockTime": 0.0,
        "warmStartCheckpointUuid": None,
        "latestCheckpointUuid": str(row["latest_checkpoint"]) if row["latest_checkpoint"] else None,
        "metadata": {},
        "latestValidation": latest,
        "bestValidation": best,
        "bestCheckpoint": best_checkpoint,
        "checkpointCount": int(row.get("checkpoint_count") or 0),
        "totalCheckpointSize": str(int(row.get("checkpoint_size") or 0)),
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
        workload = checkpoint_workload(
            {
                "uuid": c["uuid"],
                "totalBatches": c["steps_completed"],
                "state": "STATE_" + c["state"],
                "endTime": ts(c["report_time"]),
                "resources": c["resources"],
                "metadata": c["metadata"],
            }
        )
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
