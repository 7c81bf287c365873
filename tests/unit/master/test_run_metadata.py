"""Run metadata's rules (Determined's, master/internal/run/runs.go): each refusal names the
key's path; what passes is stored as given."""

from __future__ import annotations

from typing import Any

import pytest

from det.master.errors import InvalidArgument
from det.master.services.run_metadata import check


def test_nested_objects_arrays_and_scalars_pass_unchanged() -> None:
    value = {"a": {"b": [1, "x", {"c": 2}], "d": None, "e": {}}, "f": True, "g": 1.5}
    assert check(value) == value
    assert check(None) == {}


def _deep(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        node = {"k": node}
    return node


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1], "metadata: must be an object"),
        ({"a" * 51: 1}, "metadata." + "a" * 51 + ": keys are at most 50 characters"),
        ({"x": {"a.b": 1}}, "metadata.x.a.b: keys may not contain $ . [ or ]"),
        ({"$x": 1}, "metadata.$x: keys may not contain"),
        ({"l": list(range(101))}, "metadata.l: arrays hold at most 100 items"),
        ({"l": [[1]]}, "metadata.l: arrays of arrays are not allowed"),
        ({"s": "y" * 5001}, "metadata.s: strings are at most 5000 characters"),
        (_deep(11), "nested deeper than 10 levels"),
        ({f"k{i}": i for i in range(1001)}, "metadata: more than 1000 keys"),
    ],
)
def test_each_rule_is_one_line_naming_the_path(value: Any, message: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        check(value)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_ten_levels_pass() -> None:
    check(_deep(10))
