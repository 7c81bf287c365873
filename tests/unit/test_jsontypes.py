"""det.common.jsontypes: the JSON type validates JSON and refuses anything else under pydantic
(mypy's side is the strict run of ``make check`` over every use)."""

from __future__ import annotations

import datetime

import pydantic
import pytest

from det.common.jsontypes import JSONObject

ADAPTER = pydantic.TypeAdapter(JSONObject)


def test_nested_json_passes_unchanged() -> None:
    doc = {"a": [1, 2.5, "x", None, True, {"b": {"c": []}}]}
    assert ADAPTER.validate_python(doc) == doc


@pytest.mark.parametrize(
    "bad", [{"a": datetime.date(2026, 1, 1)}, {"a": [object()]}, {"a": 1 + 2j}]
)
def test_a_value_that_is_not_json_is_refused(bad: object) -> None:
    with pytest.raises(pydantic.ValidationError):
        ADAPTER.validate_python(bad)
