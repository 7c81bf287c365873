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


def _reference(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """The fold of one batch into an empty summary, one metric at a time, value by value."""
    values: dict[str, list[Any]] = {}
    for m in batch:
        for name, v in m.items():
            values.setdefault(name, []).append(v)
    out: dict[str, Any] = {}
    for name, vs in values.items():
        numbers = [v for v in vs if type(v) is int or (type(v) is float and math.isfinite(v))]
        last = vs[-1]
        if isinstance(last, float) and not math.isfinite(last):
            last = "NaN" if math.isnan(last) else ("Infinity" if last > 0 else "-Infinity")
        if not numbers:
            out[name] = {"type": "string" if isinstance(vs[-1], str) else "object", "last": last}
            continue
        try:
            total = math.fsum(numbers)
        except OverflowError:  # as a double, term by term, beyond its range infinite
            total = sum(n if isinstance(n, float) or abs(n) < 2**1023 else
                        (math.inf if n > 0 else -math.inf) for n in numbers)  # fmt: skip
        out[name] = {"type": "number", "count": len(numbers), "sum": total,
                     "min": min(numbers), "max": max(numbers), "last": last}  # fmt: skip
    return out


def test_batches_of_the_same_and_of_different_metrics_fold_as_value_by_value() -> None:
    """The fold transposes a batch whose reports carry the same metrics at once and checks
    finiteness by the sum: the same answers as one value at a time, for every kind of value."""
    import random

    rng = random.Random(29)
    kinds = [
        lambda: rng.uniform(-5, 5),
        lambda: rng.randint(-9, 9),
        lambda: math.nan,
        lambda: math.inf,
        lambda: -math.inf,
        lambda: rng.random() < 0.5,
        lambda: "text",
        lambda: 10**400,
        lambda: None,
        lambda: 1e308,
    ]
    for case in range(400):
        names = [f"m{k}" for k in range(rng.randint(1, 4))]
        same = case % 2 == 0
        weights = [8, 4, 1, 1, 1, 1, 1, 1, 1, 1] if case % 3 else [1] * len(kinds)
        batch = []
        for _ in range(rng.randint(1, 12)):
            keys = names if same else [n for n in names if rng.random() < 0.7] or names[:1]
            if not same:
                rng.shuffle(keys)
            batch.append({n: rng.choices(kinds, weights)[0]() for n in keys})
        got = _update_summary({}, "training", batch)["avg_metrics"]
        assert got == _reference(batch), batch
