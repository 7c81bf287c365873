"""``det experiment`` (alias ``e``)."""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

import yaml

from det.cli import checkpoints, context, render
from det.cli._util import Handler, add_json, noun, session, verb
from det.cli.errors import CliAPIError, CliError, UsageError
from det.cli.projects import by_names
from det.cli.resources import usd
from det.cli.session import QueryValue, Session
from det.common.jsontypes import JSONObject

if TYPE_CHECKING:
    from det.master.schemas import d

TERMINAL = {"STATE_COMPLETED", "STATE_CANCELED", "STATE_ERROR", "STATE_DELETED"}


def _config_text(path: str, overrides: list[str]) -> str:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise UsageError(f"cannot read config file {path}: {e.strerror}") from None
    if not overrides:
        return text
    # det.master.expconf (the config models: ~0.3 s to import) only for the verbs that parse a
    # config, not at every det command's start
    from det.master.expconf import ConfigError, apply_overrides, load_yaml

    try:
        data = apply_overrides(load_yaml(text), overrides)
    except (ConfigError, ValueError) as e:
        raise UsageError(f"--config: {e}") from None
    return yaml.safe_dump(data, sort_keys=False)


def create(args: argparse.Namespace) -> None:
    text = _config_text(args.config_file, args.config or [])
    files = context.pack_all(args.model_def, args.include or [])
    s = session(args)
    body = {
        "config": text,
        "modelDefinition": files,
        "activate": not args.paused,
        "validateOnly": args.test_mode,
    }
    if args.template:
        body["template"] = args.template
    if args.project_id:
        body["projectId"] = args.project_id
    try:
        resp = cast("d.v1CreateExperimentResponse", s.post("/api/v1/experiments", body))
    except CliAPIError as e:
        if e.status == 400:  # the master names the bad field: a usage error, like a local one
            raise UsageError(f"{args.config_file}: {e}") from None
        raise
    if args.test_mode:
        print("config is valid")
        return
    exp = resp["experiment"]
    print(f"Created experiment {exp['id']}")
    if args.follow_first_trial:
        trial_id = _wait_first_trial(s, exp["id"])
        _print_logs(s, trial_id, follow=True)


def _wait_first_trial(s: Session, eid: int) -> int:
    while True:
        trials = cast(
            "d.v1GetExperimentTrialsResponse", s.get(f"/api/v1/experiments/{eid}/trials")
        )["trials"]
        if trials:
            return int(trials[0]["id"])
        got = cast("d.v1GetExperimentResponse", s.get(f"/api/v1/experiments/{eid}"))
        if got["experiment"]["state"] in TERMINAL:
            raise CliError(f"experiment {eid} ended before creating a trial")
        time.sleep(0.5)


_LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _print_logs(
    s: Session,
    trial_id: int,
    follow: bool,
    tail: int | None = None,
    head: int | None = None,
    level: str | None = None,
    after: str | None = None,
    before: str | None = None,
) -> None:
    """Prints a trial's log lines as Determined's CLI does: ``head`` the first N, ``tail`` the
    last N in order (then new ones with ``follow``), ``level`` that level and above, and only
    lines between ``after`` and ``before`` (RFC 3339)."""
    filters: dict[str, Any] = {}
    if level:
        filters["levels"] = [
            "LOG_LEVEL_" + lv for lv in _LOG_LEVELS[_LOG_LEVELS.index(level.upper()) :]
        ]
    if after:
        filters["timestampAfter"] = after
    if before:
        filters["timestampBefore"] = before
    path = f"/api/v1/trials/{trial_id}/logs"
    last_id = 0
    if tail:  # the master gives the newest first; shown oldest first
        entries = list(
            s.stream(path, params={**filters, "limit": tail, "orderBy": "ORDER_BY_DESC"})
        )
        for entry in reversed(entries):
            _print_entry(entry)
        last_id = max((int(e.get("id") or 0) for e in entries), default=0)
        if not follow:
            return
    params: dict[str, QueryValue] = {**filters, "follow": str(follow).lower()}
    if head:  # the first N lines
        params["limit"] = head

    def ended() -> bool:
        # Not following, or N lines asked for: one answer. Else until the trial has ended.
        if not follow or head:
            return True
        return s.get(f"/api/v1/trials/{trial_id}")["trial"]["state"] in TERMINAL

    for entry in s.follow(path, params, ended):
        if int(entry.get("id") or 0) > last_id:
            _print_entry(entry)


def _print_entry(entry: dict[str, Any]) -> None:
    line = entry.get("log") or entry.get("message") or ""
    # The agent moved a worker's "[rank=N] " prefix into rankId; show it again.
    if entry.get("rankId") is not None:
        line = f"[rank={entry['rankId']}] {line}"
    sys.stdout.write(line if line.endswith("\n") else line + "\n")
    sys.stdout.flush()


def add_log_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--follow", action="store_true", help="keep streaming until it ends")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--head", type=int, metavar="N", help="only the first N lines")
    group.add_argument("--tail", type=int, metavar="N", help="only the last N lines")
    p.add_argument(
        "--level",
        type=str.upper,
        choices=_LOG_LEVELS,
        help="only lines of this level or higher",
    )
    p.add_argument(
        "--timestamp-after",
        metavar="TIME",
        help="only lines after TIME (RFC 3339, e.g. 2021-10-26T23:17:12Z)",
    )
    p.add_argument("--timestamp-before", metavar="TIME", help="only lines before TIME (RFC 3339)")


def list_(args: argparse.Namespace) -> None:
    s = session(args)
    params: dict[str, QueryValue] = {
        "limit": args.limit,
        "offset": args.offset,
        "orderBy": "ORDER_BY_ASC",
    }
    if not args.all:
        params["archived"] = "false"
        params["users"] = s.user
    exps = cast("d.v1GetExperimentsResponse", s.get("/api/v1/experiments", params=params))[
        "experiments"
    ]
    if args.json:
        render.print_json(exps)
        return
    render.table(
        ["ID", "Owner", "Name", "State", "Progress", "Start Time", "End Time", "Resource Pool"],
        [
            [
                e["id"],
                e["username"],
                e["name"],
                render.state(e["state"]),
                f"{(e.get('progress') or 0) * 100:.0f}%",
                render.when(e["startTime"]),
                render.when(e.get("endTime")),
                # An unmanaged experiment (a core_v2 script run outside the cluster) uses no pool.
                "(unmanaged)" if e.get("unmanaged") else e.get("resourcePool", ""),
            ]
            for e in exps
        ],
    )


TRIAL_HEADERS = ["Trial ID", "State", "H-Params", "Started", "Ended", "# of Batches"]


def list_trials(args: argparse.Namespace) -> None:
    s = session(args)
    path = f"/api/v1/experiments/{args.experiment_id}/trials"
    found: list[d.trialv1Trial] = []
    offset = args.offset
    while True:
        page = cast(
            "d.v1GetExperimentTrialsResponse",
            s.get(path, params={"limit": args.limit, "offset": offset}),
        )["trials"]
        found += page
        offset += len(page)
        if args.pages == "1" or not page or len(page) < args.limit:
            break
    if args.json:
        render.print_json(found)
        return
    render.rows(
        TRIAL_HEADERS,
        [
            [
                t["id"],
                render.state(t["state"]),
                render.hparams(t["hparams"]),
                render.when(t.get("startTime")),
                render.when(t.get("endTime")),
                t["totalBatchesProcessed"],
            ]
            for t in found
        ],
        args.csv,
    )


def show_config(args: argparse.Namespace) -> None:
    e = cast(
        "d.v1GetExperimentResponse", session(args).get(f"/api/v1/experiments/{args.experiment_id}")
    )
    print(yaml.safe_dump(e["experiment"]["config"], sort_keys=False), end="")


def delete_tb_files(args: argparse.Namespace) -> None:
    """Determined's ``det experiment delete-tb-files ID`` (DeleteTensorboardFiles)."""
    session(args).delete(f"/api/v1/experiments/{args.experiment_id}/tensorboard-files")
    print(f"Deleted the TensorBoard files of experiment {args.experiment_id}")


def download_model_def(args: argparse.Namespace) -> None:
    path = f"/api/v1/experiments/{args.experiment_id}/model_def"
    body = cast("d.v1GetModelDefResponse", session(args).get(path))
    out = Path(args.output_dir) / f"experiment_{args.experiment_id}_model_def.tgz"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(body["b64Tgz"]))
    except OSError as e:
        raise CliError(f"cannot write {out}: {e.strerror}") from None
    print(f"Wrote {out}")


def describe(args: argparse.Namespace) -> None:
    s = session(args)
    out = []
    for eid in _ids(args.experiment_ids):
        body = s.get(f"/api/v1/experiments/{eid}")
        body["trials"] = s.get(f"/api/v1/experiments/{eid}/trials")["trials"]
        out.append(body)
    if args.json:
        # Like Determined's CLI: always a list of GetExperiment responses (ours add "trials").
        render.print_json(out)
        return
    for body in out:
        e = body["experiment"]
        metric = e.get("searcherMetric") or ""
        kind = f"{e['searcherType']} search"
        if e.get("unmanaged"):
            ext = e.get("externalExperimentId")
            kind = "unmanaged" + (f" (external id {ext})" if ext else "")
        print(
            f"Experiment {e['id']}: {e['name']} ({render.state(e['state'])}, {kind}, "
            f"{(e.get('progress') or 0) * 100:.0f}% done)"
        )
        render.table(
            [
                "Trial ID",
                "State",
                "H-Params",
                "Batches",
                "Restarts",
                metric or "Searcher Metric",
                "Checkpoint",
            ],
            [
                [
                    t["id"],
                    render.state(t["state"]),
                    render.hparams(t["hparams"]),
                    t["totalBatchesProcessed"],
                    t["restarts"],
                    render.metric(t.get("searcherMetricValue")),
                    (t.get("latestCheckpointUuid") or "")[:8],
                ]
                for t in body["trials"]
            ],
        )
        for t in body["trials"]:
            why = _why_errored(s, t) if t["state"] == "STATE_ERROR" else None
            if why:
                print(f"Trial {t['id']}: {why}")
        print(_cost_line(s.get(f"/api/v1/experiments/{e['id']}/cost")))


def _cost_line(cost: dict[str, Any]) -> str:
    """``Cost: $1.23 (spot $0.40, on-demand $0.83), 4.000 slot-hours``; no dollars where the
    pools have no prices."""
    hours = f"{cost['slotHours']:.3f} slot-hours"
    if cost.get("usd") is None:
        return f"Cost: {hours} (no prices for its pools)"
    spot, od = usd(cost["spotUsd"]), usd(cost["onDemandUsd"])
    return f"Cost: {usd(cost['usd'])} (spot {spot}, on-demand {od}), {hours}"


def _why_errored(s: Session, trial: dict[str, Any]) -> str | None:
    """The master's own last line in an errored trial's log (a container that never started,
    for example an image the registry refused, says why there)."""
    r = s.request(
        "GET",
        f"/api/v1/trials/{trial['id']}/logs",
        params={"limit": 20, "orderBy": "ORDER_BY_DESC"},  # the newest first
    )
    for raw in r.text.splitlines():
        entry = (json.loads(raw) if raw.strip() else {}).get("result") or {}
        if entry.get("source") == "master" and entry.get("log"):
            return str(entry["log"]).strip()
    return None


def _ids(values: list[str]) -> list[int]:
    """Experiment ids given as ``1 2`` or, as Determined's CLI takes them, ``1,2``."""
    try:
        return [int(v) for value in values for v in value.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"experiment ids must be integers (got {' '.join(values)!r})") from None


def _action(name: str) -> Handler:
    def run(args: argparse.Namespace) -> None:
        s = session(args)
        if name == "delete":
            if (
                not args.yes
                and sys.stdin.isatty()
                and input(f"Delete experiment {args.experiment_id}? [y/N] ").strip().lower() != "y"
            ):
                raise CliError("not deleted")
            s.delete(f"/api/v1/experiments/{args.experiment_id}")
        else:
            s.post(f"/api/v1/experiments/{args.experiment_id}/{name}")
        print(f"{name}: experiment {args.experiment_id}")

    return run


def logs(args: argparse.Namespace) -> None:
    s = session(args)
    trial_id = _wait_first_trial(s, args.experiment_id)
    _print_logs(
        s,
        trial_id,
        follow=args.follow,
        tail=args.tail,
        head=args.head,
        level=args.level,
        after=args.timestamp_after,
        before=args.timestamp_before,
    )


def wait(args: argparse.Namespace) -> int:
    s = session(args)
    while True:
        e = cast("d.v1GetExperimentResponse", s.get(f"/api/v1/experiments/{args.experiment_id}"))[
            "experiment"
        ]
        render.progress(f"experiment {e['id']}", float(e.get("progress") or 0), 1.0)
        if e["state"] in TERMINAL:
            render.progress_done()
            print(f"experiment {e['id']} ended {render.state(e['state'])}")
            return 0 if e["state"] == "STATE_COMPLETED" else 1
        time.sleep(args.polling_interval)


_GC_FLAGS = {
    "save_experiment_best": "saveExperimentBest",
    "save_trial_best": "saveTrialBest",
    "save_trial_latest": "saveTrialLatest",
}


def retention_days(args: argparse.Namespace) -> int:
    """``--days N`` or ``--forever`` (-1), as Determined's ``set log-retention`` takes them."""
    if args.forever:
        return -1
    if args.days is None or args.value is not None:
        raise UsageError("log-retention: give --days N (-1 to 32767) or --forever")
    return int(args.days)


def set_(args: argparse.Namespace) -> None:
    s = session(args)
    body: JSONObject = {}
    if args.field == "log-retention":
        days = retention_days(args)
        s.put(
            f"/api/v1/experiments/{args.experiment_id}/retain_logs",
            {"experimentId": args.experiment_id, "numDays": days},
        )
        kept = "forever" if days < 0 else f"{days} days after each trial ended"
        print(f"experiment {args.experiment_id}: its trials' logs are kept {kept}")
        return
    if args.field == "gc-policy":
        policy = {
            wire: getattr(args, flag)
            for flag, wire in _GC_FLAGS.items()
            if getattr(args, flag) is not None
        }
        if not policy or args.value is not None:
            raise UsageError(
                "gc-policy: give the policy as --save-experiment-best N, --save-trial-best N"
                " and/or --save-trial-latest N (no value after the experiment id)"
            )
        body["checkpointStorage"] = policy
    elif args.value is None:
        raise UsageError(f"{args.field}: the new value is required after the experiment id")
    elif args.field == "description":
        body["description"] = args.value
    elif args.field == "name":
        body["name"] = args.value
    elif args.field in ("priority", "weight"):
        body["resources"] = {
            args.field: float(args.value) if args.field == "weight" else int(args.value)
        }
    elif args.field == "max-slots":
        # 0 removes the cap (as the config's resources.max_slots).
        body["resources"] = {"maxSlots": int(args.value)}
    s.patch(f"/api/v1/experiments/{args.experiment_id}", body)
    print(f"experiment {args.experiment_id}: {args.field} set")


def add_retention_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--days", type=int, help="log-retention: days after the task ended (-1: ever)")
    p.add_argument("--forever", action="store_true", help="log-retention: keep the logs")


def move(args: argparse.Namespace) -> None:
    s = session(args)
    p = by_names(s, args.workspace_name, args.project_name)
    s.post(
        f"/api/v1/experiments/{args.experiment_id}/move",
        {"experimentId": args.experiment_id, "destinationProjectId": p["id"]},
    )
    print(f'Moved experiment {args.experiment_id} to project "{args.project_name}"')


def label(args: argparse.Namespace) -> None:
    s = session(args)
    path = f"/api/v1/experiments/{args.experiment_id}/labels/{quote(args.label, safe='')}"
    if args.label_action == "add":
        s.request("PUT", path)
        print(f"Added label '{args.label}' to experiment {args.experiment_id}")
    else:
        s.delete(path)
        print(f"Removed label '{args.label}' from experiment {args.experiment_id}")


def continue_(args: argparse.Namespace) -> None:
    if args.config_file:
        text = _config_text(args.config_file, args.config or [])
    elif args.config:
        # det.master.expconf (the config models: ~0.3 s to import) only for the verbs that parse a
        # config, not at every det command's start
        from det.master.expconf import ConfigError, apply_overrides

        try:
            text = yaml.safe_dump(apply_overrides({}, args.config), sort_keys=False)
        except (ConfigError, ValueError) as e:
            raise UsageError(f"--config: {e}") from None
    else:
        text = ""
    session(args).post(
        "/api/v1/experiments/continue", {"id": args.experiment_id, "overrideConfig": text}
    )
    print(f"Continued experiment {args.experiment_id}")


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "experiment", aliases, "manage experiments")
    p = verb(
        sub, "create", create, "create an experiment from a config file and a context directory"
    )
    p.add_argument("config_file")
    p.add_argument(
        "model_def", nargs="?", help="the context directory (code) to upload; none: no files"
    )
    p.add_argument(
        "-i",
        "--include",
        action="append",
        metavar="PATH",
        help="a file or directory to add to the context under its own name (repeatable)",
    )
    p.add_argument("--paused", action="store_true", help="create it paused")
    p.add_argument("--template", help="a configuration template to merge under the config")
    p.add_argument("--project-id", "--project_id", dest="project_id", type=int)
    p.add_argument(
        "--config",
        action="append",
        metavar="KEY=VALUE",
        help="override a config field (repeatable)",
    )
    p.add_argument(
        "-f", "--follow-first-trial", action="store_true", help="stream the first trial's logs"
    )
    p.add_argument(
        "--test-mode",
        "--validate-only",
        dest="test_mode",
        action="store_true",
        help="only validate the config",
    )
    p = verb(sub, "list ls", list_, "list experiments")
    p.add_argument(
        "--all", "-a", action="store_true", help="include archived and other users' experiments"
    )
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--offset", type=int, default=0)
    add_json(p)
    p = verb(sub, "list-trials lt", list_trials, "list an experiment's trials")
    p.add_argument("experiment_id", type=int)
    p.add_argument("--limit", type=int, default=200, help="trials per page")
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--pages", choices=["1", "all"], default="all", help="one page, or every page")
    p.add_argument("--csv", action="store_true", help="print as CSV")
    add_json(p)
    checkpoints.add_list_flags(
        verb(sub, "list-checkpoints lc", checkpoints.list_, "list an experiment's checkpoints")
    )
    checkpoints.add_download_top_flags(
        verb(
            sub, "download", checkpoints.download_top, "download the experiment's best checkpoints"
        )
    )
    p = verb(
        sub,
        "delete-tb-files",
        delete_tb_files,
        "delete the experiment's TensorBoard files from its storage",
    )
    p.add_argument("experiment_id", type=int)
    p = verb(sub, "config", show_config, "print the experiment's config (YAML)")
    p.add_argument("experiment_id", type=int)
    p = verb(
        sub,
        "download-model-def",
        download_model_def,
        "download the experiment's context as experiment_<id>_model_def.tgz",
    )
    p.add_argument("experiment_id", type=int)
    p.add_argument("--output-dir", default=".", help="where to write it (default: .)")
    p = verb(sub, "describe", describe, "describe experiments and their trials")
    p.add_argument("experiment_ids", nargs="+", help="ids, separated by spaces or commas")
    add_json(p)
    for name in ("activate", "pause", "cancel", "kill", "archive", "unarchive", "delete"):
        p = verb(sub, name, _action(name), f"{name} an experiment")
        p.add_argument("experiment_id", type=int)
        if name == "delete":
            p.add_argument("--yes", "-y", action="store_true")
    p = verb(sub, "logs", logs, "show the first trial's logs")
    p.add_argument("experiment_id", type=int)
    add_log_flags(p)
    p = verb(sub, "wait", wait, "wait until the experiment ends (exit 0 if it completed)")
    p.add_argument("experiment_id", type=int)
    p.add_argument("--polling-interval", type=float, default=2.0)
    p = verb(sub, "move", move, "move an experiment to another project")
    p.add_argument("experiment_id", type=int)
    p.add_argument("workspace_name")
    p.add_argument("project_name")
    p = verb(sub, "label", label, "add or remove an experiment's label")
    p.add_argument("label_action", choices=["add", "remove"])
    p.add_argument("experiment_id", type=int)
    p.add_argument("label")
    p = verb(
        sub,
        "continue",
        continue_,
        "train a finished single-trial experiment further from its latest checkpoint",
    )
    p.add_argument("experiment_id", type=int)
    p.add_argument("config_file", nargs="?")
    p.add_argument("--config", action="append", metavar="KEY=VALUE")
    p = verb(
        sub,
        "set",
        set_,
        "change an experiment's name, description, priority, weight, max-slots (0: no cap) or"
        " gc-policy (the checkpoints its GC keeps; collected again at once)",
    )
    p.add_argument(
        "field",
        choices=[
            "name", "description", "priority", "weight", "max-slots", "gc-policy",
            "log-retention",
        ],
    )  # fmt: skip
    p.add_argument("experiment_id", type=int)
    p.add_argument("value", nargs="?")
    add_retention_flags(p)
    for flag in _GC_FLAGS:
        p.add_argument("--" + flag.replace("_", "-"), dest=flag, type=int, metavar="N")
