"""``det resources``: who used which slots when and what it cost (Determined's allocation
reports, with det's dollars where a pool has prices: ``-`` where it has none)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from det.cli import render
from det.cli._util import add_json, noun, session, verb

_DAILY = "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY"
_MONTHLY = "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_MONTHLY"

# --by: (the slot-seconds map, the dollars map, how a key is shown)
_BY = {
    "user": ("byUsername", "{}"),
    "label": ("byExperimentLabel", "{}"),
    "pool": ("byResourcePool", "{}"),
    "workspace": ("byWorkspace", "{}"),
    "experiment": ("byExperiment", "experiment {}"),
}


def usd(value: float | None) -> str:
    """``$1.25``; a figure under a cent keeps two significant digits; ``-`` when not priced."""
    if value is None:
        return "-"
    return f"${value:.2f}" if value == 0 or abs(value) >= 0.01 else f"${value:.2g}"


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.3f}"


def raw(args: argparse.Namespace) -> None:
    body = session(args).get(
        "/api/v1/resources/allocation/raw",
        params={"timestampAfter": args.timestamp_after, "timestampBefore": args.timestamp_before},
    )
    if args.json:
        render.print_json(body)
        return
    render.rows(
        [
            "Kind",
            "Experiment",
            "Trial",
            "User/Instance",
            "Pool",
            "Slots",
            "Start",
            "End",
            "Hours",
            "Cost",
        ],
        [
            [
                e.get("kind"),
                e.get("experimentId") or "",
                e.get("trialId") or "",
                e.get("username") or "",
                e.get("resourcePool") or "",
                e.get("slots"),
                render.when(e.get("startTime")),
                render.when(e.get("endTime")),
                _hours(e.get("seconds") or 0.0),
                usd(e.get("costUsd")),
            ]
            for e in body["resourceEntries"]
        ],
        as_csv=args.csv,
    )


def aggregated(args: argparse.Namespace) -> None:
    body = session(args).get(
        "/api/v1/resources/allocation/aggregated",
        params={
            "startDate": args.start_date,
            "endDate": args.end_date,
            "period": _MONTHLY if args.monthly else _DAILY,
        },
    )
    if args.json:
        render.print_json(body)
        return
    key, shown = _BY[args.by]
    rows: list[list[Any]] = []
    for e in body["resourceEntries"]:
        cost = e.get("cost") or {}
        money = cost.get(key) or {}
        for k, seconds in sorted(e.get(key, {}).items()):
            d = money.get(k)
            rows.append(
                [
                    e["periodStart"],
                    shown.format(k),
                    _hours(seconds),
                    usd(d["usd"] if d else None),
                    usd(d["spotUsd"] if d else None),
                    usd(d["onDemandUsd"] if d else None),
                ]
            )
        # The total's dollars are over priced usage only: say so when some rows have none.
        partial = cost.get("usd") is not None and any(k not in money for k in e.get(key, {}))
        rows.append(
            [
                e["periodStart"],
                "total (priced pools only)" if partial else "total",
                _hours(e["seconds"]),
                usd(cost.get("usd")),
                usd(cost.get("spotUsd")),
                usd(cost.get("onDemandUsd")),
            ]
        )
        if cost.get("idleUsd"):
            rows.append([e["periodStart"], "idle machines", "", usd(cost["idleUsd"]), "", ""])
    render.rows(
        ["Period", args.by.capitalize(), "Slot-hours", "Cost", "Spot", "On-demand"],
        rows,
        as_csv=args.csv,
    )


def allocations(args: argparse.Namespace) -> None:
    r = session(args).request(
        "GET",
        "/resources/allocation/allocations-csv",
        params={"timestamp_after": args.timestamp_after, "timestamp_before": args.timestamp_before},
    )
    sys.stdout.write(r.text)


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "resources", aliases, "usage and cost reports (slot-hours and dollars)")
    p = verb(sub, "raw", raw, "every allocation and cloud instance in a time window")
    p.add_argument("timestamp_after", help="start, RFC 3339 (2025-01-31T00:00:00Z)")
    p.add_argument("timestamp_before", help="end, RFC 3339")
    p.add_argument("--csv", action="store_true", help="print CSV")
    add_json(p)
    p = verb(sub, "aggregated agg", aggregated, "slot-hours and dollars per day or month")
    p.add_argument("start_date", help="first day (YYYY-MM-DD; YYYY-MM with --monthly)")
    p.add_argument("end_date", help="last day (YYYY-MM-DD; YYYY-MM with --monthly)")
    p.add_argument("--monthly", action="store_true", help="per month rather than per day")
    p.add_argument("--by", choices=sorted(_BY), default="pool", help="group by (default: pool)")
    p.add_argument("--csv", action="store_true", help="print CSV")
    add_json(p)
    p = verb(sub, "allocations alloc", allocations, "allocation-level CSV (Determined's)")
    p.add_argument("timestamp_after", help="start, RFC 3339")
    p.add_argument("timestamp_before", help="end, RFC 3339")
