"""Small helpers for Determined's wire format, shared by the API and services."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from det.master.schemas import d


def ts(value: dt.datetime | None) -> str | None:
    """Timestamps as Determined sends them: RFC 3339 UTC with a ``Z``."""
    if value is None:
        return None
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


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
