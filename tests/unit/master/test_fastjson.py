"""The ingest JSON codec: orjson only where it cannot lose a non-finite float."""

from __future__ import annotations

import json
import math

import pytest

from det.master import fastjson


def test_strict_json_is_reported_finite() -> None:
    value, finite = fastjson.loads(b'{"a": 1.5, "b": [1, -2e10, "x"], "c": {"d": null}}')
    assert finite is True
    assert value == {"a": 1.5, "b": [1, -2e10, "x"], "c": {"d": None}}


@pytest.mark.parametrize(
    "raw", [b'{"a": NaN}', b'{"a": Infinity}', b'{"a": [-Infinity]}', b'{"a": 1e400}']
)
def test_non_finite_numbers_are_parsed_and_flagged(raw: bytes) -> None:
    value, finite = fastjson.loads(raw)
    assert finite is False
    (v,) = value["a"] if isinstance(value["a"], list) else [value["a"]]
    assert not math.isfinite(v)


def test_invalid_json_raises_value_error() -> None:
    with pytest.raises(ValueError):
        fastjson.loads(b'{"a": ')


def test_both_encoders_agree_on_finite_data() -> None:
    value = {"m": [{"x": 0.1 * i, "n": i, "s": "é\t\n\\", "b": True} for i in range(50)]}
    fast = fastjson.dumps(value, finite=True)
    slow = fastjson.dumps(value, finite=False)
    assert json.loads(fast) == json.loads(slow) == value


def test_non_finite_floats_become_determineds_strings_at_any_depth() -> None:
    value = {"a": math.nan, "b": [math.inf, {"c": -math.inf}], "d": 2.5}
    assert json.loads(fastjson.dumps(value, finite=False)) == {
        "a": "NaN",
        "b": ["Infinity", {"c": "-Infinity"}],
        "d": 2.5,
    }


def test_a_parsed_body_round_trips_without_losing_a_nan() -> None:
    value, finite = fastjson.loads(b'{"loss": NaN, "acc": 0.5}')
    assert json.loads(fastjson.dumps(value, finite=finite)) == {"loss": "NaN", "acc": 0.5}
