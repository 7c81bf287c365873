"""det's own messages: routes and fields Determined does not have, in the style of
:mod:`det.master.schemas._determined` (``TypedDict``, camelCase wire names, det's limit aliases).
"""

from __future__ import annotations

from typing import Literal, NotRequired

from typing_extensions import TypedDict

from det.common.jsontypes import JSONObject


class WebhookEvent(TypedDict):
    """One delivery of a webhook (``GET /api/v1/webhooks/<id>/events``): the row's columns,
    times as the database's text (``str`` of the timestamp). ``event_id`` is what the receiver
    got (header ``X-Det-Event-Id``; a DEFAULT payload's ``event_id``); ``state`` PENDING,
    DELIVERED or DEAD (a dead letter until re-sent)."""

    id: int
    event_id: str
    event_type: str
    state: Literal["PENDING", "DELIVERED", "DEAD"]
    resends: int
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


class WebhookEventsParams(TypedDict, total=False):
    """``GET /api/v1/webhooks/<id>/events?state=DEAD``: only the events in that state."""

    state: Literal["PENDING", "DELIVERED", "DEAD"]


class PatchWebhook(TypedDict):
    """``PATCH /api/v1/webhooks/<id>``: Determined's ``PatchWebhook`` (``url``) and det's
    ``triggers`` (the whole list, replaced); queued events are kept."""

    url: NotRequired[str]
    triggers: NotRequired[list[JSONObject]]


class ResendWebhookEvents(TypedDict):
    """``POST /api/v1/webhooks/<id>/events/resend``: these dead letters (event ids), or all of
    the webhook's when ``eventIds`` is absent."""

    eventIds: NotRequired[list[str]]


class ResendWebhookEventsResponse(TypedDict):
    eventIds: list[str]
