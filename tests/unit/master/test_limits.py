"""Size limits of text and JSON fields (det.master.limits)."""

from __future__ import annotations

import pytest

from det.master import limits
from det.master.errors import InvalidArgument, PayloadTooLarge


def test_text_over_its_limit_is_413_naming_field_and_limit() -> None:
    with pytest.raises(PayloadTooLarge, match=r"notes: 11 characters, the limit is 10"):
        limits.text("notes", "x" * 11, 10)
    assert limits.text("notes", "x" * 10, 10) == "x" * 10
    assert limits.text("notes", None, 10) == ""


def test_text_of_the_wrong_type_or_blank_when_required_is_400() -> None:
    with pytest.raises(InvalidArgument, match="displayName: must be a string"):
        limits.text("displayName", {"a": 1}, 10)
    with pytest.raises(InvalidArgument, match="name: required"):
        limits.text("name", "  ", 10, required=True)


def test_labels_are_bounded_in_count_and_length() -> None:
    with pytest.raises(PayloadTooLarge, match="labels: 101 labels"):
        limits.labels("labels", ["a"] * 101)
    with pytest.raises(PayloadTooLarge, match=r"labels\[1\]"):
        limits.labels("labels", ["ok", "x" * (limits.LABEL + 1)])
    with pytest.raises(InvalidArgument):
        limits.labels("labels", ["ok", 3])


def test_metadata_is_bounded_by_its_json_size() -> None:
    with pytest.raises(PayloadTooLarge, match="metadata"):
        limits.json_object("metadata", {"blob": "x" * limits.METADATA})
    with pytest.raises(InvalidArgument):
        limits.json_object("metadata", [1, 2])


def test_hyperparameters_count_leaves_of_nested_trees() -> None:
    limits.hyperparameters({"a": {"b": 1, "c": 2}, "d": 3})
    with pytest.raises(PayloadTooLarge, match="hyperparameters: 1001 values"):
        limits.hyperparameters({f"h{i}": i for i in range(1001)})


def test_a_long_log_line_is_cut_with_a_marker_not_refused() -> None:
    line = "y" * (limits.LOG_LINE + 5)
    cut = limits.log_line(line)
    assert cut.startswith("y" * limits.LOG_LINE)
    assert cut.endswith("[det: 5 characters cut]")
    assert limits.log_line("short") == "short"
