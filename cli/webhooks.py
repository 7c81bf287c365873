"""``det webhook``: list webhooks, see a webhook's deliveries (event ids, states, last status),
re-send its dead letters and change its URL. det's own: Determined's 0.38.1 CLI has no
``det webhook`` (its WebUI and SDK make them); creating one stays with the API and the SDK."""

from __future__ import annotations

import argparse
from typing import Any

from det.cli import render
from det.cli._util import add_json, noun, session, verb
from det.cli.session import QueryValue
from det.common.jsontypes import JSONObject

_STATES = {"pending": "PENDING", "delivered": "DELIVERED", "dead": "DEAD"}


def list_(args: argparse.Namespace) -> None:
    hooks = session(args).get("/api/v1/webhooks")["webhooks"]
    if args.json:
        render.print_json(hooks)
        return
    render.table(
        ["ID", "Name", "URL", "Type", "Workspace", "Triggers"],
        [
            [
                h["id"],
                h["name"],
                h["url"],
                str(h["webhookType"]).removeprefix("WEBHOOK_TYPE_"),
                h.get("workspaceId") or "",
                ", ".join(
                    str(t["triggerType"]).removeprefix("TRIGGER_TYPE_") for t in h["triggers"]
                ),
            ]
            for h in hooks
        ],
    )


def events(args: argparse.Namespace) -> None:
    params: dict[str, QueryValue] = {}
    if args.state:
        params["state"] = _STATES[args.state]
    found = session(args).get(f"/api/v1/webhooks/{args.webhook_id}/events", params=params)
    items = found["events"]
    if args.json:
        render.print_json(items)
        return
    render.table(
        ["Event ID", "Type", "State", "Attempts", "Last Status", "Queued", "Last Attempt"],
        [
            [
                e["event_id"],
                e["event_type"],
                e["state"],
                e["attempts"],
                e["last_status"] if e["last_status"] is not None else (e["last_error"] or ""),
                render.when(e["created_at"]),
                render.when(e["last_attempt_at"]),
            ]
            for e in items
        ],
    )


def resend(args: argparse.Namespace) -> None:
    body: JSONObject = {}
    if args.event_ids:
        body["eventIds"] = args.event_ids
    done = session(args).post(f"/api/v1/webhooks/{args.webhook_id}/events/resend", body)
    ids = done["eventIds"]
    print(f"re-queued {len(ids)} event(s) of webhook {args.webhook_id}")
    for event_id in ids:
        print(event_id)


def update(args: argparse.Namespace) -> None:
    session(args).patch(f"/api/v1/webhooks/{args.webhook_id}", {"url": args.url})
    print(f"webhook {args.webhook_id}: url set; queued events go there")


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "webhook", aliases, "webhooks: deliveries, dead letters, URL")
    p = verb(sub, "list ls", list_, "list webhooks")
    add_json(p)
    p = verb(sub, "events", events, "a webhook's last 100 deliveries, newest first")
    p.add_argument("webhook_id", type=int)
    p.add_argument("--state", choices=sorted(_STATES), help="only events in this state")
    add_json(p)
    p = verb(sub, "resend", resend, "queue a webhook's dead letters again (same event ids)")
    p.add_argument("webhook_id", type=int)
    p.add_argument("event_ids", nargs="*", metavar="EVENT_ID", help="default: all dead letters")
    p = verb(sub, "update", update, "change a webhook's URL (queued events are kept)")
    p.add_argument("webhook_id", type=int)
    p.add_argument("--url", required=True)
