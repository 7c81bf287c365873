"""``det master``: info, config, logs."""

from __future__ import annotations

import argparse
from typing import Any

import requests

from det.cli import render
from det.cli._util import add_json, noun, session, verb
from det.cli.errors import MasterUnreachable
from det.cli.session import canonical_master


def info(args: argparse.Namespace) -> None:
    master = canonical_master(args.master)
    try:
        body = requests.get(master + "/info", timeout=10).json()
    except requests.ConnectionError:
        raise MasterUnreachable(f"cannot reach the master at {master}") from None
    if args.json:
        render.print_json(body)
        return
    render.table(
        ["Key", "Value"], [[k, v] for k, v in body.items() if not isinstance(v, (list, dict))]
    )


def config(args: argparse.Namespace) -> None:
    render.print_json(session(args).get("/api/v1/master/config")["config"])


def logs(args: argparse.Namespace) -> None:
    entries = session(args).get("/api/v1/master/logs")["masterLogs"]
    for e in entries[-args.tail :] if args.tail else entries:
        print(e["logEntry"]["timestamp"], e["logEntry"]["message"])


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "master", aliases, "the master")
    add_json(verb(sub, "info", info, "show master information"))
    add_json(verb(sub, "config", config, "show the master's configuration (secrets hidden)"))
    p = verb(sub, "logs", logs, "show the master's recent logs")
    p.add_argument("--tail", type=int, default=0)
