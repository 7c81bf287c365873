"""Trials, checkpoints and log lines as det sends them: shapes Determined's generated client
reads without failing (it parses enums strictly, calls ``float()`` on the searcher metric and
indexes ``avgMetrics``), and the bodies det's and Determined's tasks send."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any, cast

import orjson
import pytest

from det.master.errors import InvalidArgument, PayloadTooLarge
from det.master.rows.checkpoints import Checkpoint
from det.master.rows.logs import LogLine
from det.master.rows.trials import TrialRow
from det.master.schemas import checkpoints, d, logs, trials, validate

NOW = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)


def _checkpoint_row(**over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "uuid": uuid.UUID(int=1),
        "task_id": "t",
        "allocation_id": "t.1",
        "report_time": NOW,
        "resources": {"model.pt": 10},
        "metadata": {"steps_completed": 5},
        "state": "COMPLETED",
        "trial_id": 3,
        "experiment_id": 2,
        "hparams": {"lr": 0.1},
        "config": {"searcher": {"metric": "loss"}},
        "validation": None,
        "training": None,
    }
    row.update(over)
    return row


def test_a_checkpoint_without_metrics_has_empty_sections_and_no_searcher_metric() -> None:
    c = checkpoints.checkpoint(_checkpoint_row())
    assert c["resources"] == {"model.pt": "10"}  # int64s travel as strings
    assert c["state"] == "STATE_COMPLETED"
    training = c["training"]
    assert training.get("trainingMetrics") == {"avgMetrics": {}}
    assert training.get("validationMetrics") == {"avgMetrics": {}}
    assert training.get("searcherMetric") is None


@pytest.mark.parametrize("value", ["0.5", True, float("nan"), {"x": 1}])
def test_a_searcher_metric_that_is_not_a_finite_number_is_not_sent(value: Any) -> None:
    row = _checkpoint_row(validation={"avg_metrics": {"loss": value}})
    assert checkpoints.checkpoint(row)["training"].get("searcherMetric") is None


def test_the_searcher_metric_is_the_validation_s_value() -> None:
    row = _checkpoint_row(validation={"avg_metrics": {"loss": 2}})
    assert checkpoints.checkpoint(row)["training"].get("searcherMetric") == 2.0


def test_checkpoints_sort_by_searcher_metric_in_the_asked_order() -> None:
    rows = [
        _checkpoint_row(uuid=uuid.UUID(int=i), validation={"avg_metrics": {"loss": v}})
        for i, v in ((1, 0.3), (2, 0.1), (3, None), (4, 0.2))
    ]
    items = [checkpoints.checkpoint(r) for r in rows]

    def order(o: d.v1OrderBy | None, smaller: bool = True) -> list[int]:
        out = checkpoints.sort(
            items, attr="SORT_BY_SEARCHER_METRIC", metric=None, order=o, smaller_is_better=smaller
        )
        return [uuid.UUID(c.get("uuid", "")).int for c in out]

    assert order("ORDER_BY_ASC") == [2, 4, 1, 3]
    assert order("ORDER_BY_DESC") == [1, 4, 2, 3]
    assert order(None, smaller=False) == [1, 4, 2, 3]  # best first


@pytest.mark.parametrize(
    ("stored", "sent"),
    [
        (None, "LOG_LEVEL_INFO"),
        ("LOG_LEVEL_ERROR", "LOG_LEVEL_ERROR"),
        ("warning", "LOG_LEVEL_WARNING"),
        ("WARN", "LOG_LEVEL_WARNING"),
        ("verbose", "LOG_LEVEL_UNSPECIFIED"),
        ("LOG_LEVEL_LOUD", "LOG_LEVEL_UNSPECIFIED"),
    ],
)
def test_a_log_line_s_level_is_one_determined_knows(stored: str | None, sent: str) -> None:
    row = LogLine(
        id=7,
        task_id="t",
        allocation_id=None,
        agent_id=None,
        container_id=None,
        rank_id=None,
        timestamp=NOW,
        level=stored,
        log="hello\n",
        source=None,
        stdtype=None,
    )
    line = logs.trial_log(row, 3)
    assert line["level"] == sent and line["trialId"] == 3 and line["id"] == "7"
    assert "taskId" not in line  # not a field of v1TrialLogsResponse
    assert logs.task_log(row)["level"] == sent


def test_a_trial_is_sent_with_the_json_the_query_builds() -> None:
    validation = '{"totalBatches": 8, "numInputs": 0, "metrics": {"avgMetrics": {}}}'
    checkpoint = (
        '{"uuid": "u", "totalBatches": 8, "state": "STATE_COMPLETED", "resources": {"a": "3"}}'
    )
    row = TrialRow(
        id=3,
        experiment_id=2,
        state="ACTIVE",
        restarts=0,
        created_at=NOW,
        ended_at=None,
        hparams_json='{"lr": 0.1}',
        steps_completed=8,
        searcher_metric=0.1,
        summary_metrics_json="{}",
        task_id="t",
        latest_checkpoint=None,
        alloc_state="PULLING",
        latest_validation_json=validation,
        latest_value=0.1,
        best_validation_json=None,
        best_value=None,
        best_checkpoint_json=checkpoint,
        checkpoint_count=1,
        checkpoint_size=3,
    )
    t = orjson.loads(orjson.dumps(trials.trial(row)))
    assert t["state"] == "STATE_PULLING" and t["hparams"] == {"lr": 0.1}
    assert t["latestValidation"] == orjson.loads(validation) and t["bestValidation"] is None
    assert t["bestCheckpoint"] == orjson.loads(checkpoint)
    assert t["totalCheckpointSize"] == "3" and t["checkpointCount"] == 1
    assert t["taskIds"] == ["t"] and t["latestCheckpointUuid"] is None
    ended = trials.trial(dataclasses.replace(row, state="COMPLETED"))
    assert ended["state"] == "STATE_COMPLETED"


def test_a_checkpoint_workload_sends_sizes_as_strings() -> None:
    row = _checkpoint_row(steps_completed=8, resources={"a": 3})
    w = trials.checkpoint_workload(cast("Checkpoint", row))
    assert w["uuid"] == str(uuid.UUID(int=1)) and w["state"] == "STATE_COMPLETED"
    assert w.get("resources") == {"a": "3"} and w.get("totalBatches") == 8
    assert w.get("endTime") == "2024-05-01T12:00:00Z"


def test_checkpoint_bodies_take_sizes_as_numbers_or_strings() -> None:
    # Determined's own checkpoint-GC task sends numbers; its bindings declare strings.
    body = {"checkpoints": [{"uuid": "u", "resources": {"resources": {"a": 1, "b": "2"}}}]}
    got = validate(checkpoints.PatchCheckpointsRequest, body)
    assert got["checkpoints"][0]["resources"]["resources"] == {"a": 1, "b": "2"}
    report = validate(checkpoints.ReportCheckpointRequest, {"uuid": "u", "resources": {"a": 1}})
    assert report["resources"] == {"a": 1}
    with pytest.raises(InvalidArgument, match=r"resources\.resources"):
        validate(
            checkpoints.PatchCheckpointsRequest,
            {"checkpoints": [{"resources": {"resources": {"a": [1]}}}]},
        )
    with pytest.raises(InvalidArgument, match="sizes must be integers"):
        checkpoints.sizes("resources", {"a": "ten"})
    with pytest.raises(PayloadTooLarge):
        validate(
            checkpoints.ReportCheckpointRequest,
            {"resources": {f"f{i}" * 50: i for i in range(5000)}},
        )


def test_early_exit_takes_det_s_reasons_and_refuses_unspecified() -> None:
    assert validate(trials.TrialEarlyExit, {"reason": "EXITED_REASON_USER_REQUESTED_STOP"})
    with pytest.raises(InvalidArgument, match="reason"):
        validate(trials.TrialEarlyExit, {"reason": "EXITED_REASON_UNSPECIFIED"})
