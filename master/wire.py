"""Small helpers for Determined's wire format, shared by the API and services."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, NamedTuple, TypedDict

from typing_extensions import ReadOnly

if TYPE_CHECKING:
    from det.master.schemas import d


def ts(value: dt.datetime | None) -> str | None:
    """Timestamps as Determined sends them: RFC 3339 UTC with a ``Z``."""
    if value is None:
        return None
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


class Empty(TypedDict):
    """The answer of an operation whose response message has no fields: ``{}`` (Determined's
    empty messages, e.g. ``v1KillExperimentResponse``)."""


class Paged(TypedDict, total=False):
    """A list request's query parameters (any operation's ``...Params`` carrying ``offset`` and
    ``limit``): what :meth:`Paging.of` reads of them."""

    offset: ReadOnly[int | None]
    limit: ReadOnly[int | None]


class Paging(NamedTuple):
    """A list request's ``offset`` and ``limit`` with Determined's defaults (0: from the start;
    0: no limit). The route's contract has checked their types; absent or null is the default.
    ``offset, limit = Paging.of(params)``."""

    offset: int = 0
    limit: int = 0

    @classmethod
    def of(cls, params: Paged) -> Paging:
        given = {
            k: v
            for k in cls._fields
            if isinstance(v := params.get(k), int) and not isinstance(v, bool)
        }
        return cls(**given)


def pagination(offset: int, limit: int, total: int) -> d.v1Pagination:
    """Determined's ``v1Pagination``."""
    end = total if limit <= 0 else min(offset + limit, total)
    return {
        "offset": offset,
        "limit": limit,
        "startIndex": min(offset, total),
        "endIndex": end,
        "total": total,
    }
