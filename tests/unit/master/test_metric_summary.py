"""Trial summary metrics folded from report batches (Determined's summary_metrics shape)."""

from __future__ import annotations

import math
from typing import Any

from det.master.services.trials import _update_summary


def fold(*batches: tuple[str, list[dict[str, Any]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for group, batch in batches:
        summary = _update_summary(summary, group, batch)
    return summary


def test_numbers_count_sum_min_max_last_across_batches() -> None:
    s = fold(
        ("training", [{"loss": 3.0}, {"loss": 1.0}]),
        ("training", [{"loss": 2.0}, {"loss": 5}]),
    )
    assert s == {
        "avg_metrics": {
            "loss": {"type": "number", "count": 4, "sum": 11.0, "min": 1.0, "max": 5, "last": 5}
        }
    }


def test_groups_have_their_own_sections() -> None:
    s = fold(("training", [{"loss": 1.0}]), ("validation", [{"loss": 0.5}]), ("custom", [{"x": 1}]))
    assert set(s) == {"avg_metrics", "validation_metrics", "custom"}
    assert s["validation_metrics"]["loss"]["last"] == 0.5


def test_non_numbers_and_non_finite_values_are_not_counted() -> None:
    s = fold(
        (
            "training",
            [
                {"loss": 2.0, "flag": True, "note": "a"},
                {"loss": math.nan, "flag": False, "note": "b"},
                {"loss": math.inf, "note": "c"},
                {"loss": 4.0},
            ],
        )
    )["avg_metrics"]
    assert s["loss"] == {
        "type": "number",
        "count": 2,
        "sum": 6.0,
        "min": 2.0,
        "max": 4.0,
        "last": 4.0,
    }
    # bools are not numbers; the last value of a metric is kept as is
    assert s["flag"] == {"type": "object", "last": False}
    assert s["note"] == {"type": "string", "last": "c"}


def test_a_non_finite_last_value_is_stored_as_a_string() -> None:
    s = fold(("training", [{"loss": 1.0}, {"loss": math.nan}]))["avg_metrics"]["loss"]
    assert s["count"] == 1 and s["last"] == "NaN"


def test_metrics_missing_from_some_reports() -> None:
    s = fold(("training", [{"a": 1.0}, {"b": 2.0}, {"a": 3.0}]))["avg_metrics"]
    assert s["a"]["count"] == 2 and s["a"]["sum"] == 4.0 and s["a"]["last"] == 3.0
    assert s["b"]["count"] == 1 and s["b"]["last"] == 2.0


def test_ints_beyond_a_double_and_sums_that_overflow() -> None:
    big = 10**400
    s = fold(("training", [{"n": big}, {"n": 1}]))["avg_metrics"]["n"]
    assert s["count"] == 2 and s["max"] == big and s["last"] == 1
    s = fold(("training", [{"x": 1e308}, {"x": 1e308}]))["avg_metrics"]["x"]
    assert s["count"] == 2 and s["sum"] == math.inf and s["max"] == 1e308


def test_the_input_summary_is_not_modified() -> None:
    before = fold(("training", [{"loss": 1.0}]))
    snapshot = {"avg_metrics": {"loss": dict(before["avg_metrics"]["loss"])}}
    _update_summary(before, "training", [{"loss": 0.0}])
    assert before == snapshot
