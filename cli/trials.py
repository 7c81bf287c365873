"""``det trial`` (alias ``t``): describe, logs, kill."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, cast

from det.cli import render
from det.cli._util import add_json, noun, session, verb
from det.cli.experiments import _print_logs, add_log_flags
from det.cli.session import Session

if TYPE_CHECKING:
    from det.master.schemas import d


def workloads(s: Session, trial_id: int) -> list[dict[str, Any]]:
    """Determined's workload list: training, validation and checkpoint entries by batch."""
    body = cast(
        "d.v1GetTrialWorkloadsResponse",
        s.get(f"/api/v1/trials/{trial_id}/workloads", params={"limit": 0}),
    )
    # Read by kind (training / validation / checkpoint): plain dicts.
    return [dict(w) for w in body["workloads"]]


def describe(args: argparse.Namespace) -> None:
    s = session(args)
    trial = cast("d.v1GetTrialResponse", s.get(f"/api/v1/trials/{args.trial_id}"))["trial"]
    wls = workloads(s, args.trial_id)
    if args.json:
        # Determined's shape: the GetTrial response plus its workloads.
        render.print_json({"trial": trial, "workloads": wls})
        return
    render.table(
        [
            "Trial ID",
            "Experiment ID",
            "State",
            "H-Params",
            "Batches",
            "Restarts",
            "Started",
            "Ended",
        ],
        [
            [
                trial["id"],
                trial["experimentId"],
                render.state(trial["state"]),
                render.hparams(trial["hparams"]),
                trial["totalBatchesProcessed"],
                trial["restarts"],
                render.when(trial.get("startTime")),
                render.when(trial.get("endTime")),
            ]
        ],
    )
    print("\nWorkloads:")
    rows = []
    for w in wls:
        kind = next(k for k in ("training", "validation", "checkpoint") if w.get(k))
        body = w[kind]
        if kind == "checkpoint":
            detail = f"{body['uuid']} ({render.state(body['state'])})"
        elif args.metrics or kind == "validation":
            detail = ", ".join(
                f"{k}={render.metric(v)}" for k, v in sorted(body["metrics"]["avgMetrics"].items())
            )
        else:
            continue
        rows.append([body["totalBatches"], kind, detail, render.when(body.get("endTime"))])
    render.table(["Batches", "Workload", "Metrics / Checkpoint", "Time"], rows)


def logs(args: argparse.Namespace) -> None:
    _print_logs(
        session(args),
        args.trial_id,
        follow=args.follow,
        tail=args.tail,
        head=args.head,
        level=args.level,
        after=args.timestamp_after,
        before=args.timestamp_before,
    )


def kill(args: argparse.Namespace) -> None:
    session(args).post(f"/api/v1/trials/{args.trial_id}/kill")
    print(f"killed trial {args.trial_id}")


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "trial", aliases, "inspect trials")
    p = verb(sub, "describe", describe, "describe a trial")
    p.add_argument("trial_id", type=int)
    p.add_argument(
        "--metrics", action="store_true", help="also list training metrics (validations always)"
    )
    add_json(p)
    p = verb(sub, "logs", logs, "show a trial's logs")
    p.add_argument("trial_id", type=int)
    add_log_flags(p)
    p = verb(sub, "kill", kill, "kill a trial")
    p.add_argument("trial_id", type=int)
