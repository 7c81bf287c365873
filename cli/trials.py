"""``det trial`` (alias ``t``): describe, logs, kill."""

from __future__ import annotations

import argparse
from typing import Any

from det.cli import render
from det.cli._util import add_json, noun, session, verb
from det.cli.experiments import _print_logs


def describe(args: argparse.Namespace) -> None:
    s = session(args)
    trial = s.get(f"/api/v1/trials/{args.trial_id}")["trial"]
    metrics = (
        s.get(f"/api/v1/trials/{args.trial_id}/metrics")["metrics"]
        if args.metrics or args.json
        else []
    )
    ckpts = s.get(f"/api/v1/trials/{args.trial_id}/checkpoints")["checkpoints"]
    if args.json:
        render.print_json({"trial": trial, "metrics": metrics, "checkpoints": ckpts})
        return
    render.table(
        ["Trial ID", "Experiment ID", "State", "H-Params", "Batches", "Restarts"],
        [
            [
                trial["id"],
                trial["experimentId"],
                render.state(trial["state"]),
                trial["hparams"],
                trial["totalBatchesProcessed"],
                trial["restarts"],
            ]
        ],
    )
    print()
    render.table(
        ["Checkpoint", "Batches", "Size", "Reported"],
        [
            [
                c["uuid"],
                c["metadata"].get("steps_completed"),
                sum(int(v) for v in c["resources"].values()),
                render.when(c.get("reportTime")),
            ]
            for c in ckpts
        ],
    )
    if args.metrics:
        print()
        render.table(
            ["Group", "Batches", "Metrics"],
            [[m["group"], m["totalBatches"], m["metrics"].get("avg_metrics")] for m in metrics],
        )


def logs(args: argparse.Namespace) -> None:
    _print_logs(session(args), args.trial_id, follow=args.follow, tail=args.tail)


def kill(args: argparse.Namespace) -> None:
    session(args).post(f"/api/v1/trials/{args.trial_id}/kill")
    print(f"killed trial {args.trial_id}")


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "trial", aliases, "inspect trials")
    p = verb(sub, "describe", describe, "describe a trial")
    p.add_argument("trial_id", type=int)
    p.add_argument("--metrics", action="store_true", help="also list every metric report")
    add_json(p)
    p = verb(sub, "logs", logs, "show a trial's logs")
    p.add_argument("trial_id", type=int)
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument("--tail", type=int)
    p = verb(sub, "kill", kill, "kill a trial")
    p.add_argument("trial_id", type=int)
