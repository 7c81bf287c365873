"""wire.Paging: a list request's offset and limit carry their defaults (0 and 0: from the start,
no limit), so routes read them without defaulting again."""

from __future__ import annotations

import pytest

from det.master.wire import Paging


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, (0, 0)),
        ({"offset": None, "limit": None}, (0, 0)),
        ({"offset": 5}, (5, 0)),
        ({"limit": 10}, (0, 10)),
        ({"offset": -3, "limit": 2, "orderBy": "ORDER_BY_DESC"}, (-3, 2)),
        ({"offset": True, "limit": "7"}, (0, 0)),
    ],
)
def test_offset_and_limit_with_their_defaults(
    params: dict[str, object], expected: tuple[int, int]
) -> None:
    offset, limit = Paging.of(params)
    assert (offset, limit) == expected
    assert Paging.of(params) == Paging(*expected)


def test_the_defaults_are_the_models() -> None:
    assert Paging() == Paging.of({}) == (0, 0)
