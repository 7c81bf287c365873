"""Checkpoints on the wire: ``v1Checkpoint`` from a ``checkpoints`` row, their order and
filters as Determined's checkpoint listings apply them, and what tasks report."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, NotRequired, cast

from typing_extensions import TypedDict

from det.master import expconf, limits
from det.master.errors import InvalidArgument
from det.master.rows.checkpoints import Checkpoint
from det.master.schemas import d
from det.master.schemas._types import Int64, Metadata, _json_size
from det.master.wire import ts

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def checkpoint(r: Checkpoint) -> d.v1Checkpoint:
    """``r`` is a row of ``services.checkpoints.get``/``list_for`` (with its trial's and
    experiment's columns, and the metrics reported at its step). Sizes are int64s, sent as
    strings; a metric section with nothing reported is ``{}``."""
    config = r["config"] or {}
    searcher = config.get("searcher")
    metric = searcher.get("metric") if isinstance(searcher, dict) else None
    validation = (r["validation"] or {}).get("avg_metrics") or {}
    training = (r["training"] or {}).get("avg_metrics") or {}
    return {
        "uuid": str(r["uuid"]),
        "taskId": r["task_id"],
        "allocationId": r["allocation_id"],
        "reportTime": ts(r["report_time"]),
        "resources": {k: str(v) for k, v in (r["resources"] or {}).items()},
        "metadata": r["metadata"] or {},
        "state": cast("d.checkpointv1State", "STATE_" + r["state"]),
        "storageId": None,
        "training": {
            "trialId": r["trial_id"],
            "experimentId": r["experiment_id"],
            "experimentConfig": expconf.redact(config),
            "hparams": r["hparams"],
            "trainingMetrics": {"avgMetrics": training},
            "validationMetrics": {"avgMetrics": validation},
            # Determined's clients read it with float(): only a finite number is one.
            "searcherMetric": (
                _number(validation.get(metric)) if isinstance(metric, str) and metric else None
            ),
        },
    }


_SORT_ATTRS: tuple[d.checkpointv1SortBy, ...] = (
    "SORT_BY_UNSPECIFIED",
    "SORT_BY_UUID",
    "SORT_BY_TRIAL_ID",
    "SORT_BY_BATCH_NUMBER",
    "SORT_BY_END_TIME",
    "SORT_BY_STATE",
    "SORT_BY_SEARCHER_METRIC",
)
_STATE_ORDER = ("UNSPECIFIED", "ACTIVE", "COMPLETED", "ERROR", "DELETED", "PARTIALLY_DELETED")


def _metric_of(c: d.v1Checkpoint, name: str | None) -> float | None:
    training = c.get("training") or {}
    if name is None:
        return _number(training.get("searcherMetric"))
    validation = training.get("validationMetrics") or {}
    return _number((validation.get("avgMetrics") or {}).get(name))


def sort(
    items: list[d.v1Checkpoint],
    *,
    attr: d.checkpointv1SortBy | None,
    metric: str | None,
    order: d.v1OrderBy | None,
    smaller_is_better: bool,
) -> list[d.v1Checkpoint]:
    """Checkpoints in the order Determined's ``GetExperimentCheckpoints`` gives: by ``attr`` or
    by the validation metric ``metric``; ``ORDER_BY_DESC`` reverses. Sorting by the searcher
    metric with no order means best first. Checkpoints without the metric come last in either
    order."""
    if attr is not None and attr not in _SORT_ATTRS:  # values not from a validated request
        raise InvalidArgument(
            f"sortByAttr: unknown value {attr!r} (one of {', '.join(_SORT_ATTRS)})"
        )
    by_metric = metric is not None or attr == "SORT_BY_SEARCHER_METRIC"
    if attr == "SORT_BY_SEARCHER_METRIC" and order in (None, "ORDER_BY_UNSPECIFIED"):
        order = "ORDER_BY_ASC" if smaller_is_better else "ORDER_BY_DESC"
    desc = order == "ORDER_BY_DESC"

    def trial_key(c: d.v1Checkpoint) -> tuple[int, int]:
        t = c.get("training") or {}
        return int(t.get("trialId") or 0), _steps(c)

    if by_metric:
        have = [c for c in items if _metric_of(c, metric) is not None]
        lacking = [c for c in items if _metric_of(c, metric) is None]
        have.sort(key=lambda c: (_metric_of(c, metric), trial_key(c)), reverse=desc)
        return have + sorted(lacking, key=trial_key)

    def state_rank(c: d.v1Checkpoint) -> int:
        name = c.get("state", "STATE_UNSPECIFIED").removeprefix("STATE_")
        return _STATE_ORDER.index(name) if name in _STATE_ORDER else 0

    keys: dict[str, Callable[[d.v1Checkpoint], SupportsRichComparison]] = {
        "SORT_BY_UUID": lambda c: c.get("uuid", ""),
        "SORT_BY_BATCH_NUMBER": lambda c: (_steps(c), trial_key(c)),
        "SORT_BY_END_TIME": lambda c: (c.get("reportTime") or "", trial_key(c)),
        "SORT_BY_STATE": lambda c: (state_rank(c), trial_key(c)),
    }
    return sorted(items, key=keys.get(attr or "", trial_key), reverse=desc)


def _steps(c: d.v1Checkpoint) -> int:
    """``metadata.steps_completed`` (0 when absent or not a number)."""
    steps = (c.get("metadata") or {}).get("steps_completed", 0)
    return int(steps) if isinstance(steps, int | float | str) else 0


def filter_states(
    items: list[d.v1Checkpoint], wanted: list[d.checkpointv1State] | None
) -> list[d.v1Checkpoint]:
    """Only checkpoints in one of ``wanted``; all when empty."""
    if not wanted:
        return items
    return [c for c in items if c.get("state") in wanted]


# --- what tasks report ------------------------------------------------------------------------

# File sizes by path: Determined's int64s (strings on its wire), and det's tasks' numbers.
ReportedResources = Annotated[dict[str, Int64 | str], _json_size(limits.METADATA)]


class ReportedCheckpoint(TypedDict, total=False):
    """Determined's ``v1Checkpoint`` as a ``ReportCheckpoint`` body (sizes as numbers or
    strings)."""

    uuid: str
    taskId: str | None
    allocationId: str | None
    reportTime: str | None
    resources: ReportedResources
    metadata: Metadata
    state: d.checkpointv1State
    training: d.v1CheckpointTrainingMetadata
    storageId: Int64 | None


class ReportCheckpointRequest(ReportedCheckpoint, total=False):
    """``POST /api/v1/checkpoints``: the checkpoint itself (Determined's body), or det's older
    form with the checkpoint under ``checkpoint``."""

    checkpoint: NotRequired[ReportedCheckpoint]


class PatchedResources(TypedDict, total=False):
    resources: ReportedResources | None


class PatchedCheckpoint(TypedDict, total=False):
    uuid: str
    resources: PatchedResources | None


class PatchCheckpointsRequest(TypedDict, total=False):
    """Determined's ``v1PatchCheckpointsRequest`` with sizes as numbers or strings: its own
    checkpoint-GC task sends numbers."""

    checkpoints: list[PatchedCheckpoint]


def sizes(field: str, resources: dict[str, int | str]) -> dict[str, int]:
    """File sizes as integers (a size that is not one is refused, naming ``field``)."""
    try:
        return {str(k): int(v) for k, v in resources.items()}
    except ValueError:
        raise InvalidArgument(f"{field}: sizes must be integers") from None
