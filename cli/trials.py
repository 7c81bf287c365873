"""``det trial`` (alias ``t``): describe, logs, kill."""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from det.cli import checkpoints, experiments, render
from det.cli._util import add_json, noun, session, true_or_false, verb
from det.cli.errors import CliAPIError, CliError, UsageError
from det.cli.experiments import _print_logs, add_log_flags
from det.cli.session import QueryValue, Session

if TYPE_CHECKING:
    from det.master.schemas import d


def workloads(s: Session, trial_id: int) -> list[d.v1WorkloadContainer]:
    """Determined's workload list: training, validation and checkpoint entries by batch."""
    body = cast(
        "d.v1GetTrialWorkloadsResponse",
        s.get(f"/api/v1/trials/{trial_id}/workloads", params={"limit": 0}),
    )
    return body["workloads"]


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
    rows = [r for r in (_workload_row(w, args.metrics) for w in wls) if r is not None]
    render.table(["Batches", "Workload", "Metrics / Checkpoint", "Time"], rows)


def _workload_row(w: d.v1WorkloadContainer, metrics: bool) -> list[object] | None:
    """A workload's row (batches, kind, detail, time); a training one only with ``metrics``."""
    ckpt = w.get("checkpoint")
    if ckpt:
        detail = f"{ckpt.get('uuid')} ({render.state(ckpt.get('state'))})"
        return [ckpt.get("totalBatches"), "checkpoint", detail, render.when(ckpt.get("endTime"))]
    validation = w.get("validation")
    kind = "validation" if validation else "training"
    m = validation or w.get("training")
    if not m or not (metrics or kind == "validation"):
        return None
    values = (m.get("metrics") or {}).get("avgMetrics") or {}
    detail = ", ".join(f"{k}={render.metric(v)}" for k, v in sorted(values.items()))
    return [m.get("totalBatches"), kind, detail, render.when(m.get("endTime"))]


def _checkpoint_to_download(s: Session, args: argparse.Namespace) -> str:
    """The uuid ``det trial download`` means: ``--uuid``, the latest, or the best (by the
    searcher metric, or by ``--sort-by`` in the order ``--smaller-is-better`` gives)."""
    if args.uuid:
        return str(args.uuid)
    if args.sort_by and args.smaller_is_better is None:
        raise UsageError("--sort-by needs --smaller-is-better true|false")
    params: dict[str, QueryValue] = {"states": "STATE_COMPLETED", "limit": 1}
    if args.latest:
        params |= {"sortByAttr": "SORT_BY_END_TIME", "orderBy": "ORDER_BY_DESC"}
    elif args.sort_by:
        params |= {
            "sortByMetric": args.sort_by,
            "orderBy": "ORDER_BY_ASC" if args.smaller_is_better else "ORDER_BY_DESC",
        }
    else:
        params |= {"sortByAttr": "SORT_BY_SEARCHER_METRIC"}
    path = f"/api/v1/trials/{args.trial_id}/checkpoints"
    found = cast("d.v1GetTrialCheckpointsResponse", s.get(path, params=params))["checkpoints"]
    if not found:
        raise CliError(f"trial {args.trial_id} has no completed checkpoint")
    return str(found[0]["uuid"])


def download(args: argparse.Namespace) -> None:
    args.uuid = _checkpoint_to_download(session(args), args)
    args.mode = "direct"
    checkpoints.download(args)


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


def set_(args: argparse.Namespace) -> None:
    days = experiments.retention_days(args)
    session(args).put(
        f"/api/v1/trials/{args.trial_id}/retain_logs", {"trialId": args.trial_id, "numDays": days}
    )
    kept = "forever" if days < 0 else f"{days} days after it ended"
    print(f"trial {args.trial_id}: its logs are kept {kept}")


def support_bundle(args: argparse.Namespace) -> None:
    """Determined's ``det trial support-bundle ID [-o DIR]``: a gzipped tar in DIR,
    det-bundle-trial-<id>-<time>.tar.gz, holding in a folder of that name the trial's logs
    (trial_logs.txt), the master's (master_logs.txt), the GetTrial answer's trial
    (api_trial_call.json) and the GetExperiment answer (api_experiment_call.json), as its CLI
    names them. Everything is read before the archive is written, and it appears whole or not
    at all. A user the master refuses its logs (they are for admins) gets the bundle with a
    line saying so in master_logs.txt."""
    out = Path(args.output_dir) if args.output_dir else Path.cwd()
    if not out.is_dir():
        raise UsageError(f"-o/--output-dir: {out} is not a directory")
    s = session(args)
    trial = cast("d.v1GetTrialResponse", s.get(f"/api/v1/trials/{args.trial_id}"))["trial"]
    experiment = s.get(f"/api/v1/experiments/{trial['experimentId']}")
    trial_logs = "".join(
        _line(e.get("log") or e.get("message") or "")
        for e in s.stream(f"/api/v1/trials/{args.trial_id}/logs", params={"follow": "false"})
    )
    try:
        master_logs = "".join(
            _line(f"{e['timestamp']} [{e.get('level') or ''}]: {e.get('message') or ''}")
            for e in (
                r["logEntry"] for r in s.stream("/api/v1/master/logs", params={"follow": "false"})
            )
        )
    except CliAPIError as e:
        if e.status != 403:
            raise
        # The master's logs are for admins: the trial's owner still gets the rest.
        master_logs = _line(f"(not included: {e})")
        print(f"det: the bundle has no master logs: {e}", file=sys.stderr)
    name = f"det-bundle-trial-{args.trial_id}-{dt.datetime.now().strftime('%Y%m%dT%H%M%S')}"
    files = {
        "trial_logs.txt": trial_logs,
        "master_logs.txt": master_logs,
        "api_trial_call.json": json.dumps(trial),
        "api_experiment_call.json": json.dumps(experiment),
    }
    fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{name}.", suffix=".tar.gz")
    try:
        with os.fdopen(fd, "wb") as f, tarfile.open(fileobj=f, mode="w:gz") as tf:
            for member, text in files.items():
                data = text.encode()
                info = tarfile.TarInfo(f"{name}/{member}")
                info.size, info.mtime, info.mode = (
                    len(data),
                    int(dt.datetime.now().timestamp()),
                    0o644,
                )
                tf.addfile(info, io.BytesIO(data))
        final = out / f"{name}.tar.gz"
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    print(f"bundle path: {final}")


def _line(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "trial", aliases, "inspect trials")
    p = verb(sub, "set", set_, "set a trial's log-retention (--days N or --forever)")
    p.add_argument("field", choices=["log-retention"])
    p.add_argument("trial_id", type=int)
    p.add_argument("value", nargs="?", help=argparse.SUPPRESS)
    experiments.add_retention_flags(p)
    p = verb(sub, "describe", describe, "describe a trial")
    p.add_argument("trial_id", type=int)
    p.add_argument(
        "--metrics", action="store_true", help="also list training metrics (validations always)"
    )
    add_json(p)
    p = verb(sub, "download", download, "download a trial's best, latest or named checkpoint")
    p.add_argument("trial_id", type=int)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--best", action="store_true", help="the best by the searcher metric")
    which.add_argument("--latest", action="store_true", help="the most recent")
    which.add_argument("--uuid", help="this checkpoint")
    p.add_argument("-o", "--output-dir")
    p.add_argument("--sort-by", metavar="METRIC", help="with --best: this validation metric")
    p.add_argument("--smaller-is-better", type=true_or_false, metavar="(true|false)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the path")
    p = verb(
        sub,
        "support-bundle",
        support_bundle,
        "a tar.gz of the trial's and the master's logs and the trial's and experiment's records",
    )
    p.add_argument("trial_id", type=int)
    p.add_argument("-o", "--output-dir", help="where to write it (default: the current directory)")
    p = verb(sub, "logs", logs, "show a trial's logs")
    p.add_argument("trial_id", type=int)
    add_log_flags(p)
    p = verb(sub, "kill", kill, "kill a trial")
    p.add_argument("trial_id", type=int)
