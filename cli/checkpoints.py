"""``det checkpoint``: describe, list, download."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from det.cli import render
from det.cli._util import add_json, noun, session, verb
from det.cli.errors import CliError


def _row(c: dict[str, Any]) -> list[Any]:
    t = c.get("training") or {}
    size = sum(int(v) for v in (c.get("resources") or {}).values())
    return [
        c["uuid"],
        t.get("trialId"),
        c["metadata"].get("steps_completed"),
        render.state(c["state"]),
        render.metric(t.get("searcherMetric")),
        size,
        render.when(c.get("reportTime")),
    ]


HEADERS = ["UUID", "Trial ID", "Batches", "State", "Searcher Metric", "Size (bytes)", "Reported"]


def describe(args: argparse.Namespace) -> None:
    c = session(args).get(f"/api/v1/checkpoints/{args.uuid}")["checkpoint"]
    if args.json:
        render.print_json(c)
        return
    render.table(HEADERS, [_row(c)])
    print()
    render.table(["File", "Size"], sorted((k, v) for k, v in c["resources"].items()))


def list_(args: argparse.Namespace) -> None:
    s = session(args)
    params: dict[str, Any] = {}
    if args.best is not None:  # the master sorts, best first (Determined's ``--best``)
        params = {
            "sortByAttr": "SORT_BY_SEARCHER_METRIC",
            "states": "STATE_COMPLETED",
            "limit": args.best,
        }
    path = f"/api/v1/experiments/{args.experiment_id}/checkpoints"
    ckpts = s.get(path, params=params)["checkpoints"]
    if args.json:
        render.print_json(ckpts)
        return
    render.table(HEADERS, [_row(c) for c in ckpts])


def download(args: argparse.Namespace) -> None:
    from det.storage import CheckpointNotFoundError, download_checkpoint

    c = session(args).get(f"/api/v1/checkpoints/{args.uuid}")["checkpoint"]
    storage = ((c.get("training") or {}).get("experimentConfig") or {}).get("checkpoint_storage")
    if not storage:
        raise CliError(f"checkpoint {args.uuid} has no storage configuration to download from")
    dst = Path(args.output_dir or Path("checkpoints") / args.uuid)
    dst.mkdir(parents=True, exist_ok=True)
    try:
        download_checkpoint(storage, args.uuid, str(dst))
    except CheckpointNotFoundError as e:
        raise CliError(f"checkpoint {args.uuid}: files not found in storage ({e})") from None
    print(f"Local checkpoint path: {dst}")


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "checkpoint", aliases, "checkpoints")
    p = verb(sub, "describe", describe, "describe a checkpoint")
    p.add_argument("uuid")
    add_json(p)
    p = verb(sub, "list ls", list_, "list an experiment's checkpoints")
    p.add_argument("experiment_id", type=int)
    p.add_argument("--best", type=int, help="only the N best by the searcher metric")
    add_json(p)
    p = verb(sub, "download", download, "download a checkpoint's files")
    p.add_argument("uuid")
    p.add_argument("-o", "--output-dir")
