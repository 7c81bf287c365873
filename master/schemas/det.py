"""det's own messages: routes and fields Determined does not have, in the style of
:mod:`det.master.schemas._determined` (``TypedDict``, camelCase wire names, det's limit aliases).
"""

from __future__ import annotations

from typing_extensions import TypedDict


class WebhookEvent(TypedDict):
    """One delivery of a webhook (``GET /api/v1/webhooks/<id>/events``): the row's columns,
    times as the database's text (``str`` of the timestamp)."""

    id: int
    created_at: str
    attempts: int
    last_status: int | None
    last_error: str | None
    last_attempt_at: str | None
    delivered_at: str | None
    failed_at: str | None
    next_attempt_at: str


class WebhookEvents(TypedDict):
    events: list[WebhookEvent]
