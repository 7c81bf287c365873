"""The searcher's length and unit as the harness reads them from the trial's config."""

from __future__ import annotations

import pytest

from det.core._searcher import Unit, parse_max_length, parse_units


def test_the_length_and_unit_come_from_either_spelling_of_max_length() -> None:
    assert parse_max_length({"searcher": {"max_length": {"batches": 100}}}) == 100
    assert parse_units({"searcher": {"max_length": {"batches": 100}}}) == Unit.BATCHES
    assert parse_max_length({"searcher": {"max_length": 7, "unit": "epochs"}}) == 7
    assert parse_units({"searcher": {"max_length": 7, "unit": "epochs"}}) == Unit.EPOCHS
    assert parse_max_length({"searcher": {}}) is None and parse_units({}) is None
    assert parse_max_length({"searcher": "single"}) is None


def test_a_length_that_is_not_a_number_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"searcher\.max_length: expected a number, not list"):
        parse_max_length({"searcher": {"max_length": [100]}})
