"""Metric reports through the API: rows, the trial summary, the searcher metric, bad batches.
On the master's app in the test's process (``api_master``); the control loop's passes that make
an experiment's trial run in the test's thread."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.integration.inproc import InProcessMaster, active_trial

pytestmark = pytest.mark.integration


def _report(group: str, steps: int, metrics: dict[str, Any]) -> dict[str, Any]:
    return {
        "group": group,
        "trialRunId": 1,
        "stepsCompleted": steps,
        "metrics": {"avgMetrics": metrics},
    }


def _rows(pg_url: str, trial_id: int) -> list[tuple[Any, ...]]:
    with psycopg.connect(pg_url) as conn:
        return conn.execute(
            "SELECT metric_group, total_batches, trial_run_id, metrics FROM metrics"
            " WHERE trial_id = %s ORDER BY id",
            (trial_id,),
        ).fetchall()


def test_a_batch_lands_as_rows_summary_and_searcher_metric(
    api_master: InProcessMaster, pg_url: str
) -> None:
    tid = active_trial(api_master)
    batch = [_report("training", s, {"loss": 1.0 / s, "lr": 0.1, "tag": "a"}) for s in (1, 2, 4)]
    batch += [_report("validation", 4, {"loss": 0.3}), _report("validation", 8, {"loss": 0.2})]
    out = api_master.post(f"/api/v1/trials/{tid}/metrics/batch", {"reports": batch})
    assert out == {"rows": 5}
    rows = _rows(pg_url, tid)
    assert [(g, b) for g, b, _, _ in rows] == [
        ("training", 1),
        ("training", 2),
        ("training", 4),
        ("validation", 4),
        ("validation", 8),
    ]
    assert rows[1][3] == {"avg_metrics": {"loss": 0.5, "lr": 0.1, "tag": "a"}}
    trial = api_master.get(f"/api/v1/trials/{tid}")["trial"]
    train = trial["summaryMetrics"]["avg_metrics"]
    assert train["loss"] == {
        "type": "number",
        "count": 3,
        "sum": 1.75,
        "min": 0.25,
        "max": 1.0,
        "last": 0.25,
    }
    assert train["tag"] == {"type": "string", "last": "a"}
    assert trial["summaryMetrics"]["validation_metrics"]["loss"]["min"] == 0.2
    assert trial["searcherMetricValue"] == 0.2
    assert trial["totalBatchesProcessed"] == 8

    # A second batch folds into the same summary.
    api_master.post(
        f"/api/v1/trials/{tid}/metrics/batch", {"reports": [_report("training", 9, {"loss": 2.0})]}
    )
    train = api_master.get(f"/api/v1/trials/{tid}")["trial"]["summaryMetrics"]["avg_metrics"]
    assert (train["loss"]["count"], train["loss"]["max"], train["loss"]["last"]) == (4, 2.0, 2.0)


def test_non_finite_literals_in_a_batch_are_kept_as_strings(
    api_master: InProcessMaster, pg_url: str
) -> None:
    tid = active_trial(api_master)
    raw = (
        '{"reports": [{"group": "training", "trialRunId": 1, "stepsCompleted": 1,'
        ' "metrics": {"avgMetrics": {"loss": NaN, "gn": Infinity, "ok": 1.5},'
        ' "batchMetrics": [{"loss": -Infinity}]}}]}'
    )
    r = api_master.session().post(
        f"{api_master.url}/api/v1/trials/{tid}/metrics/batch",
        data=raw,
        headers={"Content-Type": "application/json"},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    (row,) = _rows(pg_url, tid)
    assert row[3] == {
        "avg_metrics": {"loss": "NaN", "gn": "Infinity", "ok": 1.5},
        "batch_metrics": [{"loss": "-Infinity"}],
    }
    summary = api_master.get(f"/api/v1/trials/{tid}")["trial"]["summaryMetrics"]["avg_metrics"]
    assert summary["loss"]["last"] == "NaN" and "count" not in summary["loss"]
    assert summary["ok"]["count"] == 1


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ({"group": "training", "stepsCompleted": 3, "metrics": {}}, "avgMetrics"),
        (_report("training", "three", {"loss": 1.0}), "stepsCompleted"),  # type: ignore[arg-type]
        ({**_report("training", 3, {"loss": 1.0}), "group": 7}, "group"),
        ("not-an-object", "valid dictionary"),
    ],
)
def test_a_bad_report_rejects_the_whole_batch(
    api_master: InProcessMaster, pg_url: str, bad: Any, needle: str
) -> None:
    tid = active_trial(api_master)
    before = api_master.get(f"/api/v1/trials/{tid}")["trial"]
    r = api_master.session().post(
        f"{api_master.url}/api/v1/trials/{tid}/metrics/batch",
        json={"reports": [_report("training", 1, {"loss": 1.0}), bad]},
        timeout=10,
    )
    assert r.status_code == 400, r.text
    assert needle in r.json()["message"] and "reports[1]" in r.json()["message"]
    assert _rows(pg_url, tid) == []
    after = api_master.get(f"/api/v1/trials/{tid}")["trial"]
    assert after["summaryMetrics"] == before["summaryMetrics"] == {}


def test_reports_for_an_unknown_trial_are_refused(api_master: InProcessMaster) -> None:
    r = api_master.session().post(
        f"{api_master.url}/api/v1/trials/999999/metrics/batch",
        json={"reports": [_report("training", 1, {"loss": 1.0})]},
        timeout=10,
    )
    assert r.status_code == 404 and "999999" in r.json()["message"]


def test_best_validation_is_404_until_there_is_one(api_master: InProcessMaster) -> None:
    """Determined's client reads a 404 as "no validations yet" (and a null as a crash)."""
    tid = active_trial(api_master)
    eid = api_master.get(f"/api/v1/trials/{tid}")["trial"]["experimentId"]
    url = f"{api_master.url}/api/v1/experiments/{eid}/searcher/best_searcher_validation_metric"
    r = api_master.session().get(url, timeout=10)
    assert r.status_code == 404 and "no validation" in r.json()["message"]
    api_master.post(
        f"/api/v1/trials/{tid}/metrics/batch",
        {
            "reports": [
                _report("validation", 5, {"loss": 0.7}),
                _report("validation", 9, {"loss": 0.4}),
            ]
        },
    )
    assert api_master.session().get(url, timeout=10).json() == {"metric": 0.4}


def test_the_legacy_per_group_routes_take_determined_s_body(
    api_master: InProcessMaster, pg_url: str
) -> None:
    """``ReportTrialTrainingMetrics``/``ReportTrialValidationMetrics``: the body is the
    ``v1TrialMetrics`` itself (the request's ``body: "training_metrics"``), not wrapped."""
    tid = active_trial(api_master)
    for group in ("training", "validation"):
        api_master.post(
            f"/api/v1/trials/{tid}/{group}_metrics",
            {
                "trialId": tid,
                "trialRunId": 1,
                "stepsCompleted": "6",  # an int64, as protobuf JSON may send it
                "metrics": {"avgMetrics": {"loss": 0.5}},
            },
        )
    rows = _rows(pg_url, tid)
    assert [(g, b, r, m["avg_metrics"]) for g, b, r, m in rows] == [
        ("training", 6, 1, {"loss": 0.5}),
        ("validation", 6, 1, {"loss": 0.5}),
    ]
    trial = api_master.get(f"/api/v1/trials/{tid}")["trial"]
    assert trial["searcherMetricValue"] == 0.5
    assert trial["latestValidation"]["metrics"] == {"avgMetrics": {"loss": 0.5}}
