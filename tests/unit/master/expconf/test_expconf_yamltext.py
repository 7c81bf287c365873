"""YAML text read as JSON (det.master.expconf.yamltext): what a config and an override load as."""

from __future__ import annotations

import pytest

from det.master.expconf import ConfigError, apply_overrides, load_yaml
from det.master.expconf.base import default_of
from det.master.expconf.schema import Resources
from det.master.expconf.yamltext import YAMLError, load_json


def test_dates_stay_the_strings_they_are_written_as() -> None:
    data = load_yaml("data:\n  day: 2024-01-31\n  at: 2024-01-31 10:00:00\n")
    assert data == {"data": {"day": "2024-01-31", "at": "2024-01-31 10:00:00"}}


def test_yaml_1_2_floats_and_plain_scalars() -> None:
    assert load_json("[1e-3, 3, true, null, x]") == [0.001, 3, True, None, "x"]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("data:\n  blob: !!binary aGk=\n", "data.blob"),
        ("data:\n  s: !!set {a, b}\n", "data.s"),
        ("data:\n  1: one\n", "data"),
    ],
)
def test_what_json_cannot_hold_is_refused_naming_where(text: str, where: str) -> None:
    with pytest.raises(ConfigError, match=rf"invalid YAML: .* at {where}\b"):
        load_yaml(text)


def test_a_duplicate_key_names_line_and_column() -> None:
    with pytest.raises(YAMLError) as e:
        load_json("a: 1\na: 2\n")
    assert (e.value.line, e.value.column) == (2, 1)
    assert "duplicate key 'a'" in e.value.reason


def test_an_override_value_loads_as_json_too() -> None:
    out = apply_overrides({"data": {}}, ["data.day=2024-01-31", "data.rate=1e-3"])
    assert out == {"data": {"day": "2024-01-31", "rate": 0.001}}
    with pytest.raises(ConfigError, match="not valid YAML"):
        apply_overrides({}, ["data.x=!!binary aGk="])


def test_default_of_checks_the_kind_asked_for() -> None:
    assert default_of(Resources, "slots_per_trial", int) == 1
    with pytest.raises(TypeError, match="slots_per_trial"):
        default_of(Resources, "slots_per_trial", str)
