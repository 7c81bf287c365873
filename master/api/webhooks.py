"""``/api/v1/webhooks``: Determined's webhooks (``det webhook create|list|delete``).

Global webhooks (no ``workspaceId``) are for admins; a workspace's webhooks for its owner and
admins. A user lists the global ones and those of workspaces they own (admins: all). A
non-admin's webhook is held to the egress policy (:mod:`det.master.egress`) when it is made,
tested and delivered; the test answers the receiver's status, never its body."""

from __future__ import annotations

import datetime as dt
import json
import uuid

from flask import Blueprint

from det.master import egress
from det.master.api import _access
from det.master.api._common import TASK, USER, Conn, allow, current_user, db, state
from det.master.api._contract import contract
from det.master.errors import InvalidArgument, PermissionDenied
from det.master.schemas import d
from det.master.schemas import det as det_wire
from det.master.services import owners, webhook_delivery
from det.master.services import webhooks as svc
from det.master.wire import Empty

bp = Blueprint("webhooks", __name__)


def _may_edit(conn: Conn, workspace_id: int | None) -> None:
    user = current_user()
    if not workspace_id:
        if not user.admin:
            raise PermissionDenied("a global webhook (no workspaceId) is for admins only")
        return
    _access.workspace(conn, workspace_id)


@bp.get("/api/v1/webhooks")
@contract("GetWebhooks")
def list_() -> d.v1GetWebhooksResponse:
    user = current_user()
    with db() as conn:
        rows = svc.list_(conn)
        if not user.admin:
            mine = {
                r.workspace_id
                for r in rows
                if r.workspace_id
                and (o := owners.of(conn, "workspace", r.workspace_id)) is not None
                and o.owner_id == user.id
            }
            rows = [r for r in rows if r.workspace_id is None or r.workspace_id in mine]
    return {"webhooks": [svc.wire(r) for r in rows]}  # type: ignore[misc]


@bp.post("/api/v1/webhooks")
@contract("PostWebhook")
def create(body: d.v1Webhook) -> d.v1PostWebhookResponse:
    user = current_user()
    with db() as conn:
        workspace_id = body.get("workspaceId") or None
        if workspace_id is not None and not owners.of(conn, "workspace", workspace_id):
            raise InvalidArgument(f"workspaceId: workspace {workspace_id} not found")
        _may_edit(conn, workspace_id)
        policy = egress.Policy.of(state().config.egress, restricted=not user.admin)
        row = svc.create(conn, body, user.id, policy)
    return {"webhook": svc.wire(row)}  # type: ignore[typeddict-item]


@bp.delete("/api/v1/webhooks/<int:webhook_id>")
@contract("DeleteWebhook")
def delete(webhook_id: int) -> Empty:
    with db() as conn:
        row = svc.get(conn, webhook_id)
        _may_edit(conn, row.workspace_id)
        svc.delete(conn, webhook_id)
    return {}


@bp.patch("/api/v1/webhooks/<int:webhook_id>")
@contract("PatchWebhook", body=det_wire.PatchWebhook)
def patch(webhook_id: int, body: det_wire.PatchWebhook) -> Empty:
    """Determined's PatchWebhook (``url``), with det's ``triggers``; queued events are kept and
    go to the new URL. A non-admin's new URL is held to the egress policy as at creation."""
    user = current_user()
    with db() as conn:
        row = svc.get(conn, webhook_id)
        _may_edit(conn, row.workspace_id)
        # Deliveries are judged by whoever chose the URL: a non-admin's new URL makes the
        # webhook theirs (restricted) even if an admin made it.
        by_admin = user.admin and svc.made_by_admin(conn, webhook_id)
        policy = egress.Policy.of(state().config.egress, restricted=not by_admin)
        chosen_by = None if user.admin else user.id
        svc.patch(conn, row, dict(body), policy, chosen_by)  # type: ignore[arg-type]
    return {}


@bp.post("/api/v1/webhooks/<int:webhook_id>/test")
@contract("TestWebhook")
def test(webhook_id: int) -> d.v1TestWebhookResponse:
    """Sends a test event now (no transaction open while it is sent); a failure is a 400 with
    the receiver's status (never its body) or why no answer came."""
    with db() as conn:
        row = svc.get(conn, webhook_id)
        _may_edit(conn, row.workspace_id)
        by_admin = svc.made_by_admin(conn, webhook_id)
    body = json.dumps(svc.test_payload(row)).encode()
    key = webhook_delivery.signing_key(state()) if row.webhook_type == svc.DEFAULT else None
    policy = egress.Policy.of(state().config.egress, restricted=not by_admin)
    timeout = state().config.webhooks.delivery.timeout_seconds
    status, error = webhook_delivery.post(row.url, body, key, policy, timeout=timeout)
    if status is None:
        raise InvalidArgument(f"url: no answer: {error}")
    if status >= 400:
        raise InvalidArgument(f"url: the receiver answered {status}")
    return {"completed": True}


@bp.get("/api/v1/webhooks/<int:webhook_id>/events")
@contract(params=det_wire.WebhookEventsParams, response=det_wire.WebhookEvents)
def events(webhook_id: int, params: det_wire.WebhookEventsParams) -> det_wire.WebhookEvents:
    """det's own: the last 100 deliveries of a webhook (``?state=DEAD``: its dead letters)
    with their event id and type, state and last status."""
    with db() as conn:
        row = svc.get(conn, webhook_id)
        _may_edit(conn, row.workspace_id)
        out = svc.events(conn, webhook_id, params.get("state"))
    return {"events": [_event(e) for e in out]}


@bp.post("/api/v1/webhooks/<int:webhook_id>/events/resend")
@contract(body=det_wire.ResendWebhookEvents, response=det_wire.ResendWebhookEventsResponse)
def resend(
    webhook_id: int, body: det_wire.ResendWebhookEvents
) -> det_wire.ResendWebhookEventsResponse:
    """det's own: queue dead letters again with the same event ids (``eventIds``; absent: all
    of the webhook's); answers the ids re-queued."""
    ids: list[uuid.UUID] | None = None
    if "eventIds" in body:
        ids = []
        for i, text in enumerate(body["eventIds"]):
            try:
                ids.append(uuid.UUID(text))
            except ValueError:
                raise InvalidArgument(f"eventIds[{i}]: {text!r} is not an event id") from None
    with db() as conn:
        row = svc.get(conn, webhook_id)
        _may_edit(conn, row.workspace_id)
        done = svc.resend(conn, webhook_id, ids)
    return {"eventIds": [str(e) for e in done]}


def _event(e: svc.Delivery) -> det_wire.WebhookEvent:
    return {
        "id": e["id"],
        "event_id": str(e["event_id"]),
        "event_type": e["event_type"],
        "state": e["state"],
        "resends": e["resends"],
        "created_at": str(e["created_at"]),
        "attempts": e["attempts"],
        "last_status": e["last_status"],
        # An answer's body is not kept; rows written before that keep theirs, not shown.
        "last_error": e["last_error"] if e["last_status"] is None else None,
        "last_attempt_at": _text(e["last_attempt_at"]),
        "delivered_at": _text(e["delivered_at"]),
        "failed_at": _text(e["failed_at"]),
        "next_attempt_at": str(e["next_attempt_at"]),
    }


def _text(v: dt.datetime | None) -> str | None:
    return None if v is None else str(v)


@bp.post("/api/v1/webhooks/custom")
@allow(USER, TASK)
@contract("PostWebhookEventData")
def custom(body: d.v1PostWebhookEventDataRequest) -> Empty:
    """Training code's alert (Determined's ``core.train`` ``report_alert`` / PostWebhookEventData)."""
    experiment_id = int(body.get("experimentId") or 0)
    trial_id = int(body.get("trialId") or 0) or None
    if experiment_id <= 0:
        raise InvalidArgument("experimentId: required")
    with db() as conn:
        _access.experiment(conn, experiment_id)
        svc.custom_event(conn, experiment_id, trial_id, body.get("data"))
    return {}
