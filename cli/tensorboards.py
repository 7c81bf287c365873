"""``det tensorboard``: start TensorBoard over experiments' or trials' TensorBoard files and
reach it through the master's proxy; list, open, logs, kill."""

from __future__ import annotations

import argparse
import sys
import webbrowser
from typing import Any

from det.cli._util import add_workspace_flag, noun, session, verb, workspace_id
from det.cli.commands import (
    LaunchBody,
    add_config_verb,
    add_list_verb,
    add_logs_and_kill_verbs,
    add_set_verb,
    task_config,
)
from det.cli.context import pack
from det.cli.errors import UsageError
from det.cli.notebooks import wait_ready
from det.cli.session import Session


def _url(s: Session, tb: dict[str, Any]) -> str:
    return f"{s.master.rstrip('/')}{tb['serviceAddress']}"


def _open(s: Session, tb: dict[str, Any]) -> None:
    # A single-use ticket on the tasks' own origin; traded there for a cookie for this
    # TensorBoard.
    webbrowser.open(s.post("/api/v1/proxy_tickets", {"taskId": tb["id"]})["url"])


class _LaunchTensorboard(LaunchBody, total=False):
    """LaunchTensorboardRequest: the trials it serves, by experiment or by trial."""

    experimentIds: list[int]
    trialIds: list[int]


def start(args: argparse.Namespace) -> None:
    if not args.experiment_ids and not args.trial_ids:
        raise UsageError("name experiment ids or --trial-ids")
    config = task_config(args.config_file, args.config, [])
    body: _LaunchTensorboard = {
        "experimentIds": args.experiment_ids,
        "trialIds": args.trial_ids,
        "config": config,
    }
    if args.context:
        body["files"] = pack(args.context)
    s = session(args)
    if args.workspace:
        body["workspaceId"] = workspace_id(s, args.workspace)
    tb = s.post("/api/v1/tensorboards", body)["tensorboard"]
    if args.detach:
        print(tb["id"])
        return
    print(f"Launched TensorBoard (id: {tb['id']}), waiting for it to be ready", file=sys.stderr)
    wait_ready(s, tb["id"], "TensorBoard")
    print(f"TensorBoard is running at: {_url(s, tb)}")
    if not args.no_browser:
        _open(s, tb)


def open_(args: argparse.Namespace) -> None:
    s = session(args)
    tb = s.get(f"/api/v1/tensorboards/{args.tensorboard_id}")["tensorboard"]
    if tb["state"] == "STATE_TERMINATED":
        raise UsageError(f"TensorBoard {tb['id']} has ended")
    print(_url(s, tb))
    if not args.no_browser:
        _open(s, tb)


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "tensorboard", aliases, "TensorBoard on the cluster")
    p = verb(sub, "start", start, "start TensorBoard for experiments or trials")
    p.add_argument("experiment_ids", type=int, nargs="*", help="experiment ids")
    p.add_argument("-t", "--trial-ids", type=int, nargs="+", default=[], help="trial ids")
    p.add_argument("--config-file", help="task config file (.yaml)")
    p.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="config override"
    )
    p.add_argument("-c", "--context", help="a directory whose files go into the task's workdir")
    p.add_argument("--no-browser", action="store_true", help="only print the URL")
    p.add_argument("-d", "--detach", action="store_true", help="print the id and return")
    add_workspace_flag(p)
    add_list_verb(sub, "tensorboard", "TensorBoard")
    p = verb(sub, "open", open_, "print (and open in a browser) a TensorBoard's URL")
    p.add_argument("tensorboard_id")
    p.add_argument("--no-browser", action="store_true", help="only print the URL")
    add_config_verb(sub, "tensorboard", "TensorBoard")
    add_set_verb(sub, "tensorboard", "tensorboard")
    add_logs_and_kill_verbs(sub, "tensorboard", "TensorBoard")
