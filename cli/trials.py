"""``det trial`` (alias ``t``): describe, logs, kill."""

from __future__ import annotations

import argparse
from typing import Any

from det.cli import render
from det.cli._util import add_json, noun, session, verb
from det.cli.errors import APIError
from det.cli.experiments import _print_logs, add_log_flags
from det.cli.session import Session

_KIND_ORDER = {"training": 0, "checkpoint": 1, "validation": 2}


def _metrics_workload(m: dict[str, Any]) -> dict[str, Any]:
    metrics = m.get("metrics") or {}
    return {
        "totalBatches": m["totalBatches"],
        "endTime": m.get("endTime"),
        "numInputs": 0,
        "metrics": {
            "avgMetrics": metrics.get("avg_metrics") or {},
            "batchMetrics": metrics.get("batch_metrics") or [],
        },
    }


def workloads(s: Session, trial_id: int) -> list[dict[str, Any]]:
    """Determined's workload list (training, validation and checkpoint entries by batch).

    Read from ``GET /trials/{id}/workloads`` when the master has it, otherwise put together from
    the trial's metrics and checkpoints, which carry the same facts.
    """
    try:
        return list(s.get(f"/api/v1/trials/{trial_id}/workloads", params={"limit": 0})["workloads"])
    except APIError as e:
        if e.status != 404 or "trial" in str(e).lower():
            raise
    out: list[tuple[int, int, dict[str, Any]]] = []
    for m in s.get(f"/api/v1/trials/{trial_id}/metrics")["metrics"]:
        group = m.get("group")
        if group in ("training", "validation"):
            out.append((m["totalBatches"], _KIND_ORDER[group], {group: _metrics_workload(m)}))
    for c in s.get(f"/api/v1/trials/{trial_id}/checkpoints")["checkpoints"]:
        batches = int((c.get("metadata") or {}).get("steps_completed") or 0)
        entry = {
            "uuid": c["uuid"],
            "state": c["state"],
            "totalBatches": batches,
            "endTime": c.get("reportTime"),
            "resources": c.get("resources") or {},
            "metadata": c.get("metadata") or {},
        }
        out.append((batches, _KIND_ORDER["checkpoint"], {"checkpoint": entry}))
    out.sort(key=lambda x: (x[0], x[1]))
    return [w for _, _, w in out]


def describe(args: argparse.Namespace) -> None:
    s = session(args)
    trial = s.get(f"/api/v1/trials/{args.trial_id}")["trial"]
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
    _print_logs(session(args), args.trial_id, follow=args.follow, tail=args.tail, head=args.head)


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
