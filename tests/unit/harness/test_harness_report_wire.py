"""The harness's metric and checkpoint reports against the models the master validates them
with: the same keys, and what the harness builds passes the master's check."""

from __future__ import annotations

import datetime as dt
from typing import Any

from det.core._checkpoint import ReportCheckpointBody, checkpoint_body
from det.core._train import MetricsReportEntry, ReportedMetrics, _json_safe, _Report, report_entry
from det.master.schemas import checkpoints as master_checkpoints
from det.master.schemas import d, validate
from det.master.schemas import trials as master_trials


def _keys(tp: Any) -> set[str]:
    # A TypedDict's keys, without evaluating its annotations (the harness imports its JSON types
    # for mypy only: the task side's Python has no typing_extensions).
    keys: frozenset[str] = tp.__required_keys__ | tp.__optional_keys__
    return set(keys)


def test_a_metrics_report_has_the_keys_the_master_reads() -> None:
    assert _keys(MetricsReportEntry) == _keys(master_trials.MetricsReportEntry)
    assert _keys(ReportedMetrics) == _keys(d.v1Metrics)


def test_a_metrics_report_passes_the_master_s_check() -> None:
    metrics = _json_safe({"loss": float("nan"), "acc": 0.5, "n": 3})
    entry = report_entry(7, _Report("validation", 40, metrics, [{"loss": 0.1}]))
    checked = validate(master_trials.ReportMetricsBatchRequest, {"reports": [entry]})
    (report,) = checked["reports"]
    assert report["trialRunId"] == 7 and report["stepsCompleted"] == 40
    assert report["metrics"].get("avgMetrics") == {"loss": "NaN", "acc": 0.5, "n": 3}
    assert report["metrics"].get("batchMetrics") == [{"loss": 0.1}]


def test_a_checkpoint_report_passes_the_master_s_check() -> None:
    assert _keys(ReportCheckpointBody) == _keys(master_checkpoints.ReportedCheckpoint)
    now = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    body = checkpoint_body("u", "t", "t.1", {"a": 3}, {"steps_completed": 4}, 2, now)
    checked = validate(master_checkpoints.ReportCheckpointRequest, body)
    assert checked.get("resources") == {"a": "3"} and checked.get("storageId") == 2
    assert checked.get("metadata") == {"steps_completed": 4}
