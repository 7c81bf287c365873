"""``det checkpoint``: describe, list, download, delete."""

from __future__ import annotations

import argparse
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from det.cli import render
from det.cli._util import add_json, noun, session, verb
from det.cli.errors import CliError
from det.storage import CheckpointNotFoundError, download_checkpoint

if TYPE_CHECKING:
    from det.master.schemas import d


def _row(c: d.v1Checkpoint) -> list[Any]:
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
    c = cast("d.v1GetCheckpointResponse", session(args).get(f"/api/v1/checkpoints/{args.uuid}"))[
        "checkpoint"
    ]
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
    ckpts = cast("d.v1GetExperimentCheckpointsResponse", s.get(path, params=params))["checkpoints"]
    if args.json:
        render.print_json(ckpts)
        return
    render.rows(HEADERS, [_row(c) for c in ckpts], getattr(args, "csv", False))


def _download_via_master(args: argparse.Namespace, dst: Path) -> None:
    """The master reads the storage and sends a gzip tar (for storage this machine cannot reach)."""
    r = session(args).request("GET", f"/checkpoints/{args.uuid}", stream=True, timeout=None)
    with tarfile.open(fileobj=r.raw, mode="r|gz") as tf:
        tf.extractall(dst, filter="data")


def download(args: argparse.Namespace) -> None:
    if args.mode == "master":
        dst = Path(args.output_dir or Path("checkpoints") / args.uuid)
        dst.mkdir(parents=True, exist_ok=True)
        _download_via_master(args, dst)
        print(f"Local checkpoint path: {dst}")
        return
    c = cast("d.v1GetCheckpointResponse", session(args).get(f"/api/v1/checkpoints/{args.uuid}"))[
        "checkpoint"
    ]
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


def delete(args: argparse.Namespace) -> None:
    uuids = [u for raw in args.uuids for u in raw.split(",") if u]
    session(args).delete("/api/v1/checkpoints", json={"checkpointUuids": uuids})
    print(f"Deleting {len(uuids)} checkpoint(s) (their experiment's GC task removes the files)")


def remove_files(args: argparse.Namespace) -> None:
    """Determined's ``det checkpoint rm UUIDS --glob G``: the files the globs name go from
    each checkpoint (no glob: the checkpoints' files are read again from storage)."""
    uuids = [u for raw in args.uuids for u in raw.split(",") if u]
    body = {"checkpointUuids": uuids, "checkpointGlobs": list(args.glob)}
    session(args).post("/api/v1/checkpoints/rm", body)
    if args.glob:
        print(f"Removing files matching {', '.join(args.glob)} from {len(uuids)} checkpoint(s)")
    else:
        print(f"Reading the files of {len(uuids)} checkpoint(s) from storage again")


def add_list_flags(p: argparse.ArgumentParser) -> None:
    """``det checkpoint list`` and ``det experiment list-checkpoints`` (Determined's name)."""
    p.add_argument("experiment_id", type=int)
    p.add_argument("--best", type=int, metavar="N", help="only the N best by the searcher metric")
    p.add_argument("--csv", action="store_true", help="print as CSV")
    add_json(p)


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "checkpoint", aliases, "checkpoints")
    p = verb(sub, "describe", describe, "describe a checkpoint")
    p.add_argument("uuid")
    add_json(p)
    add_list_flags(verb(sub, "list ls", list_, "list an experiment's checkpoints"))
    p = verb(sub, "download", download, "download a checkpoint's files")
    p.add_argument("uuid")
    p.add_argument("-o", "--output-dir")
    p.add_argument(
        "--mode",
        choices=["direct", "master"],
        default="direct",
        help="direct: read the storage from here; master: the master reads it and sends a tar",
    )
    p = verb(sub, "delete", delete, "delete checkpoints (their experiment's GC task does it)")
    p.add_argument("uuids", nargs="+", help="checkpoint uuids (or comma-separated lists)")
    p = verb(sub, "rm", remove_files, "remove files matching globs from checkpoints")
    p.add_argument("uuids", nargs="+", help="checkpoint uuids (or comma-separated lists)")
    p.add_argument(
        "--glob",
        action="append",
        default=[],
        help="a glob of files to remove (repeatable; '**' spans directories); none: re-read",
    )
    p.add_argument("--yes", action="store_true", help="accepted for Determined's CLI: no prompt")
