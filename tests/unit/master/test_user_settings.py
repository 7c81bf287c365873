"""The checks of a PostUserSetting body: one error naming the entry and the field."""

from __future__ import annotations

from typing import Any

import pytest

from det.master.errors import APIError
from det.master.services import user_settings as svc


def test_parses_entries_with_defaults_for_a_missing_path_and_value() -> None:
    got = svc.parse([{"key": "a", "value": "1"}, {"key": "b", "storagePath": "p"}])
    assert got == [svc.Setting("", "a", "1"), svc.Setting("p", "b", "")]
    assert svc.parse(None) == []


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"key": "a"}, "settings: must be a list"),
        (["a"], "settings[0]: must be an object"),
        ([{"key": "a"}, {"value": "x"}], "settings[1].key: required non-empty string"),
        ([{"key": " "}], "settings[0].key: required non-empty string"),
        ([{"key": "a", "storagePath": "p" * 256}], "settings[0].storagePath: 256 characters"),
        ([{"key": "a", "value": "v" * (svc.VALUE + 1)}], "settings[0].value: 65537 characters"),
        ([{"key": str(i)} for i in range(101)], "settings: 101 entries, the limit is 100"),
    ],
)
def test_refuses_bad_entries_in_one_line(settings: Any, message: str) -> None:
    with pytest.raises(APIError) as e:
        svc.parse(settings)
    assert message in str(e.value) and "\n" not in str(e.value)
