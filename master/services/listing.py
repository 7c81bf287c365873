"""What Determined's list operations share: paging and partial-match filters."""

from __future__ import annotations

from typing import TypeVar

Row = TypeVar("Row")


def page(rows: list[Row], offset: int, limit: int) -> tuple[list[Row], int]:
    """Determined's paging: ``offset`` rows skipped (a negative one counts from the end), at most
    ``limit`` (0: all) returned, with the total before paging."""
    total = len(rows)
    if offset < 0:
        offset = max(0, total + offset)
    return rows[offset : (offset + limit) if limit > 0 else None], total


def contains(column: str, text: str) -> tuple[str, str]:
    """A condition and its argument: ``column`` contains ``text``, ignoring case (``%`` and
    ``_`` in ``text`` match themselves)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"{column} ILIKE %s ESCAPE '\\'", f"%{escaped}%"
