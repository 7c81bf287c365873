"""``det master``: info, config (show, set), logs, cluster-message, policy."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, cast

import det
from det.cli import master_policy, render
from det.cli._util import add_json, noun, session, shows_help, verb
from det.cli.errors import UsageError
from det.cli.session import QueryValue, canonical_master, get_info
from det.common.jsontypes import JSONObject

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


_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def config_set(args: argparse.Namespace) -> None:
    """Determined's PatchMasterConfig: applied by every master process, without a restart."""
    log: dict[str, Any] = {}
    paths = []
    if args.log_level is not None:
        log["level"] = "LOG_LEVEL_" + args.log_level.upper()
        paths.append("log.level")
    if args.log_color is not None:
        log["color"] = args.log_color == "on"
        paths.append("log.color")
    if not paths:
        raise UsageError("det master config set: give --log-level and/or --log-color")
    session(args).patch(
        "/api/v1/master/config", {"config": {"log": log}, "fieldMask": {"paths": paths}}
    )
    print("master config changed: " + ", ".join(paths))


def message_set(args: argparse.Namespace) -> None:
    body: JSONObject = {"message": args.message}
    if args.start:
        body["startTime"] = args.start
    if args.end:
        body["endTime"] = args.end
    if args.duration:
        body["duration"] = args.duration
    session(args).request("PUT", "/api/v1/master/cluster_message", json=body)
    print("cluster message set")


def message_get(args: argparse.Namespace) -> None:
    body = cast(
        "d.v1GetClusterMessageResponse", session(args).get("/api/v1/master/cluster_message")
    )
    m = body.get("clusterMessage")
    if args.json:
        render.print_json(body)
    elif m is None:
        print("no cluster message")
    else:
        render.table(
            ["Message", "Start", "End"],
            [[m["message"], m["startTime"], m.get("endTime") or "(until cleared)"]],
        )


def message_clear(args: argparse.Namespace) -> None:
    session(args).delete("/api/v1/master/cluster_message")
    print("cluster message cleared")


def logs(args: argparse.Namespace) -> None:
    params: dict[str, QueryValue] = {"follow": str(bool(args.follow)).lower()}
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
    p = verb(sub, "config", config, "show the master's configuration (secrets hidden)")
    add_json(p)
    config_sub = p.add_subparsers(dest="config_verb", metavar="VERB")
    add_json(verb(config_sub, "show", config, "show the master's configuration (secrets hidden)"))
    p = verb(config_sub, "set", config_set, "change the log level of every master process")
    p.add_argument(
        "--log-level",
        "--log.level",
        dest="log_level",
        type=str.upper,
        choices=_LEVELS,
        help="the level every master process logs at, from now on",
    )
    p.add_argument("--log-color", "--log.color", dest="log_color", choices=["on", "off"])
    msg = sub.add_parser("cluster-message", help="the message shown to every user")
    msg.set_defaults(func=shows_help(msg))
    msg_sub = msg.add_subparsers(dest="message_verb", metavar="VERB")
    p = verb(msg_sub, "set", message_set, "set the cluster message (admins)")
    p.add_argument("-m", "--message", required=True, help="the text (at most 250 characters)")
    p.add_argument("-s", "--start", help="RFC 3339 time to start showing it (default: now)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("-e", "--end", help="RFC 3339 time to stop showing it")
    group.add_argument("-d", "--duration", help="how long to show it: 24h, 90m, 5d, 2w")
    add_json(verb(msg_sub, "get", message_get, "show the active cluster message"))
    p = verb(msg_sub, "clear", message_clear, "clear the cluster message (admins)")
    p.add_argument("-c", "--clear", action="store_true", help=argparse.SUPPRESS)
    master_policy.register(sub)
    p = verb(sub, "logs", logs, "show the master's recent logs")
    p.add_argument("--tail", type=int, default=0, metavar="N", help="only the last N lines")
    p.add_argument("-f", "--follow", action="store_true", help="keep streaming new lines")
    p = nouns.add_parser("version", help="show the client's and the master's versions")
    p.set_defaults(func=version)
    add_json(p)
