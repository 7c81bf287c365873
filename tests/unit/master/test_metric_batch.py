"""A batch of metric reports read for the write: the harness's common shape by C loops
(``_plain_batch``) gives what the general loop (``_read_batch``) gives, and anything else is
left to the general loop."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from det.master.errors import InvalidArgument
from det.master.services.trials import _Batch, _plain_batch, _read_batch


def report(step: Any, run: Any = 1, group: Any = "training", **metrics: Any) -> dict[str, Any]:
    return {
        "group": group,
        "trialRunId": run,
        "stepsCompleted": step,
        "metrics": metrics or {"avgMetrics": {"loss": 1.0 / (1 + abs(hash(step)) % 7)}},
    }


def read(reports: list[Any]) -> _Batch:
    return _read_batch(reports, "loss", None)


def test_the_harness_batch_takes_the_plain_path_and_reads_as_the_general_loop() -> None:
    reports = [report(s, run=3) for s in (5, 2, 9, 9)]
    plain = _plain_batch(reports)  # type: ignore[arg-type]
    assert plain is not None
    assert plain == read(reports)
    assert plain.spans == {3: (2, 9)} and plain.firsts == {(3, "training"): 2}
    assert plain.top == 9 and plain.validations == []
    assert [r["total"] for r in plain.rows] == [5, 2, 9, 9]
    assert plain.rows[0] == {
        "run": 3,
        "grp": "training",
        "total": 5,
        "body": {"avg_metrics": reports[0]["metrics"]["avgMetrics"]},
    }


@pytest.mark.parametrize(
    "reports",
    [
        [],
        [report(1), report(2, group="validation")],  # a validation: searcher events
        [report(1, group=None)],  # the group defaulted: the general loop's rule
        [report(1), report(2, run=2)],  # two runs
        [report(1, run=True)],  # a boolean is no run id
        [report(1, run=-1)],
        [report(True)],
        [report(1.0)],
        [report(None)],
        [report(1, avgMetrics={"loss": 1.0}, batchMetrics=[{"loss": 1.0}])],
        [report(1, avgMetrics=[1.0])],
        [report(1, batchMetrics=[])],  # no averages
        [report(1), "not a report"],
    ],
)
def test_other_batches_are_left_to_the_general_loop(reports: list[Any]) -> None:
    assert _plain_batch(reports) is None


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "x", "training", "validation"]),
)
_reports = st.fixed_dictionaries(
    {
        "group": st.one_of(st.sampled_from(["training", "validation", "", "custom"]), _scalars),
        "trialRunId": st.one_of(st.integers(-1, 2), _scalars),
        "stepsCompleted": st.one_of(st.integers(0, 2**63 - 1), _scalars),
        "metrics": st.one_of(
            st.fixed_dictionaries(
                {"avgMetrics": st.dictionaries(st.sampled_from(["loss", "acc"]), _scalars)},
                optional={"batchMetrics": st.one_of(st.none(), st.lists(st.just({"loss": 1})))},
            ),
            _scalars,
        ),
    }
)


@settings(max_examples=400, deadline=None, database=None)
@given(st.lists(st.one_of(_reports, _reports, _reports, _scalars), max_size=6))
def test_the_plain_path_reads_any_batch_it_takes_as_the_general_loop(reports: list[Any]) -> None:
    plain = _plain_batch(reports)
    if plain is None:
        return
    assert plain == read(reports)


@settings(max_examples=200, deadline=None, database=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2**63 - 1), st.dictionaries(st.text(max_size=3), _scalars)),
        min_size=1,
        max_size=8,
    ),
    st.integers(0, 5),
)
def test_harness_batches_of_any_steps_and_values_read_alike(
    steps_and_averages: list[tuple[int, dict[str, Any]]], run: int
) -> None:
    reports = [report(s, run, avgMetrics=a) for s, a in steps_and_averages]
    plain = _plain_batch(reports)  # type: ignore[arg-type]
    assert plain is not None
    assert plain == read(reports)


def test_the_general_loop_still_names_bad_input() -> None:
    with pytest.raises(InvalidArgument, match=r"metrics\[1\]: must be an object"):
        read([report(1), "not a report"])
    with pytest.raises(InvalidArgument, match=r"metrics\[0\]\.trialRunId: must be >= 0"):
        read([report(1, run=-1)])
