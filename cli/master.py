"""``det master``: info, config, logs."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, cast

import det
from det.cli import render
from det.cli._util import add_json, noun, session, verb
from det.cli.session import canonical_master, get_info

if TYPE_CHECKING:
    from det.master.schemas import d


def info(args: argparse.Namespace) -> None:
    master = canonical_master(args.master)
    body = get_info(master)
    if args.json:
        render.print_json(body)
        return
    render.table(
        ["Key", "Value"], [[k, v] for k, v in body.items() if not isinstance(v, (list, dict))]
    )


def config(args: argparse.Namespace) -> None:
    config = cast("d.v1GetMasterConfigResponse", session(args).get("/api/v1/master/config"))
    render.print_json(config["config"])


def logs(args: argparse.Namespace) -> None:
    params: dict[str, Any] = {"follow": str(bool(args.follow)).lower()}
    if args.tail:
        params["offset"] = -args.tail
    for e in session(args).stream("/api/v1/master/logs", params=params):
        entry = e["logEntry"]
        print(entry["timestamp"], entry["message"], flush=bool(args.follow))


def version(args: argparse.Namespace) -> None:
    """The client's version, and the master's: det's own and the Determined API it speaks."""
    master = canonical_master(args.master)
    rows = [["client", det.__version__]]
    body = get_info(master)
    rows.append(["master", str(body.get("detVersion") or body.get("version"))])
    rows.append(["Determined API", str(body.get("version"))])
    if args.json:
        render.print_json({k: v for k, v in rows})
        return
    render.table(["Component", "Version"], rows)


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "master", aliases, "the master")
    add_json(verb(sub, "info", info, "show master information"))
    add_json(verb(sub, "config", config, "show the master's configuration (secrets hidden)"))
    p = verb(sub, "logs", logs, "show the master's recent logs")
    p.add_argument("--tail", type=int, default=0, metavar="N", help="only the last N lines")
    p.add_argument("-f", "--follow", action="store_true", help="keep streaming new lines")
    p = nouns.add_parser("version", help="show the client's and the master's versions")
    p.set_defaults(func=version)
    add_json(p)
