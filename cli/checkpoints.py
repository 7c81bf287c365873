"""``det checkpoint``: describe, list, download, delete."""

from __future__ import annotations

import argparse
import json
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from det.cli import render
from det.cli._util import add_json, noun, session, true_or_false, verb
from det.cli.errors import CliError, UsageError
from det.cli.session import QueryValue, Session
from det.common import tarsafe
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
    params: dict[str, QueryValue] = {}
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
        tarsafe.extract_all(tf, dst)


def download(args: argparse.Namespace) -> None:
    if args.mode == "master":
        dst = Path(args.output_dir or Path("checkpoints") / args.uuid)
        dst.mkdir(parents=True, exist_ok=True)
        _download_via_master(args, dst)
        print(f"Local checkpoint path: {dst}")
        return
    dst = Path(args.output_dir or Path("checkpoints") / args.uuid)
    download_direct(session(args), args.uuid, dst)
    print(f"Local checkpoint path: {dst}")


def download_direct(s: Session, uuid: str, dst: Path) -> d.v1Checkpoint:
    """Copies checkpoint ``uuid``'s files from its storage into ``dst`` (made if missing) and
    answers its record; an unknown checkpoint, or one with no storage configuration, is refused
    before ``dst`` is made."""
    c = cast("d.v1GetCheckpointResponse", s.get(f"/api/v1/checkpoints/{uuid}"))["checkpoint"]
    storage = ((c.get("training") or {}).get("experimentConfig") or {}).get("checkpoint_storage")
    if not storage:
        raise CliError(f"checkpoint {uuid} has no storage configuration to download from")
    dst.mkdir(parents=True, exist_ok=True)
    try:
        download_checkpoint(storage, uuid, str(dst))
    except CheckpointNotFoundError as e:
        raise CliError(f"checkpoint {uuid}: files not found in storage ({e})") from None
    return c


def download_top(args: argparse.Namespace) -> None:
    """Determined's ``det experiment download ID [--top-n N] [-o DIR] [--sort-by M
    --smaller-is-better B] [-q]``: the experiment's N best completed checkpoints (by the searcher
    metric, or by validation metric M in the order B gives), each into DIR/<uuid>."""
    if args.top_n < 1:
        raise UsageError(f"--top-n: must be at least 1 (got {args.top_n})")
    if (args.sort_by is None) != (args.smaller_is_better is None):
        raise UsageError("--sort-by and --smaller-is-better go together: give both or neither")
    params: dict[str, str | int] = {"states": "STATE_COMPLETED", "limit": args.top_n}
    if args.sort_by:
        order = "ORDER_BY_ASC" if args.smaller_is_better else "ORDER_BY_DESC"
        params |= {"sortByMetric": args.sort_by, "orderBy": order}
    else:  # the master orders by the searcher metric, best first
        params["sortByAttr"] = "SORT_BY_SEARCHER_METRIC"
    s = session(args)
    path = f"/api/v1/experiments/{args.experiment_id}/checkpoints"
    found = cast("d.v1GetExperimentCheckpointsResponse", s.get(path, params=params))["checkpoints"]
    if not found:
        raise CliError(f"experiment {args.experiment_id} has no completed checkpoint")
    top = Path(args.output_dir)
    for listed in found:
        dst = top / listed["uuid"]
        c = download_direct(s, listed["uuid"], dst)
        if args.quiet:
            print(dst)
            continue
        _show_downloaded(c, dst)
        print()


def _show_downloaded(c: d.v1Checkpoint, path: Path) -> None:
    """A downloaded checkpoint as Determined's CLI shows one: its path, then its record."""
    print("Local checkpoint path:")
    print(path, "\n")
    t = c.get("training") or {}
    meta = c.get("metadata") or {}
    render.table(
        [
            "Experiment ID",
            "Trial ID",
            "Steps Completed",
            "Report Time",
            "Checkpoint UUID",
            "Validation Metrics",
            "Metadata",
        ],
        [
            [
                t.get("experimentId"),
                t.get("trialId"),
                meta.get("steps_completed"),
                c.get("reportTime"),
                c["uuid"],
                json.dumps(t.get("validationMetrics"), indent=4) if t else None,
                json.dumps(meta, indent=4),
            ]
        ],
    )


def add_download_top_flags(p: argparse.ArgumentParser) -> None:
    """``det experiment download``'s arguments, as Determined's CLI names them."""
    p.add_argument("experiment_id", type=int, help="the experiment")
    p.add_argument(
        "-o",
        "--output-dir",
        default="checkpoints",
        help="each checkpoint goes to OUTPUT_DIR/<uuid>/ (default: checkpoints)",
    )
    p.add_argument(
        "--top-n", type=int, default=1, metavar="N", help="the N best checkpoints (default: 1)"
    )
    p.add_argument(
        "--sort-by", metavar="METRIC", help="a validation metric (default: the searcher's)"
    )
    p.add_argument(
        "--smaller-is-better",
        type=true_or_false,
        metavar="(true|false)",
        help="with --sort-by: the order of METRIC",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print only the paths")


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
