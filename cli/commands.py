"""``det command`` (alias ``cmd``): run a command on the cluster, list, logs, kill; and the
launch, list and kill that notebooks, shells and TensorBoards share with it."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, TypedDict

import yaml

from det.cli import context, render
from det.cli._util import add_json, add_workspace_flag, noun, session, verb, workspace_id
from det.cli.errors import CliError, UsageError
from det.cli.experiments import _print_entry, add_log_flags
from det.cli.session import QueryValue, Session
from det.common.jsontypes import JSONObject


class LaunchBody(TypedDict, total=False):
    """What Launch{Command,Notebook,Shell,Tensorboard}Request have in common."""

    config: JSONObject
    workspaceId: int
    files: list[context.ContextFile]
    templateName: str


def task_config(config_file: Any, overrides: list[str], volumes: list[str]) -> JSONObject:
    """A task config from ``--config-file``, ``--config a.b=c`` and ``-v host:container``."""
    # det.master.expconf (the config models: ~0.3 s to import) only for the verbs that parse a
    # config, not at every det command's start
    from det.master.expconf import ConfigError, apply_overrides

    data: JSONObject = {}
    if config_file:
        try:
            data = yaml.safe_load(Path(config_file).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise UsageError(f"cannot read config file {config_file}: {e}") from None
        if not isinstance(data, dict):
            raise UsageError(f"{config_file}: the config must be a mapping")
    try:
        data = apply_overrides(data, overrides)
    except (ConfigError, ValueError) as e:
        raise UsageError(f"--config: {e}") from None
    for v in volumes:
        host, sep, container = v.partition(":")
        if not sep or not host or not container:
            raise UsageError(f"-v {v}: expected HOST_PATH:CONTAINER_PATH")
        mounts = data.setdefault("bind_mounts", [])
        if not isinstance(mounts, list):
            raise UsageError("bind_mounts: expected a list of mounts")
        mounts.append({"host_path": host, "container_path": container})
    return data


def launch_body(
    args: argparse.Namespace, config: JSONObject, s: Session | None = None
) -> LaunchBody:
    """The Launch*Request of ``args``; ``s`` resolves ``-w/--workspace`` to its id."""
    body: LaunchBody = {"config": config}
    if getattr(args, "workspace", None) and s is not None:
        body["workspaceId"] = workspace_id(s, args.workspace)
    if getattr(args, "context", None):
        body["files"] = context.pack(args.context)
    if getattr(args, "template", None):
        body["templateName"] = args.template
    return body


def add_launch_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config-file", help="task config file (.yaml)")
    p.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="config override"
    )
    p.add_argument(
        "-v", "--volume", action="append", default=[], help="bind mount HOST_PATH:CONTAINER_PATH"
    )
    p.add_argument("-c", "--context", help="a directory whose files go into the task's workdir")
    p.add_argument("--template", help="a config template to apply")
    p.add_argument("-d", "--detach", action="store_true", help="print the id and return")
    add_workspace_flag(p)


def follow_logs(s: Session, task_id: str) -> None:
    """Prints the task's log lines until it ends."""
    for entry in s.follow(
        f"/api/v1/tasks/{task_id}/logs", {"follow": "true"}, lambda: task_ended(s, task_id)
    ):
        _print_entry(entry)


def task_ended(s: Session, task_id: str) -> bool:
    return bool(s.get(f"/api/v1/tasks/{task_id}")["task"].get("endTime"))


def wait_ended(s: Session, path: str, key: str, timeout: float = 60.0) -> dict[str, Any]:
    """The task's record once it is TERMINATED (its logs may end a moment before)."""
    deadline = time.monotonic() + timeout
    while True:
        item: dict[str, Any] = s.get(path)[key]
        if item["state"] == "STATE_TERMINATED" or time.monotonic() > deadline:
            return item
        time.sleep(0.2)


def run(args: argparse.Namespace) -> int:
    entrypoint = list(args.entrypoint)
    if entrypoint and entrypoint[0] == "--":
        entrypoint = entrypoint[1:]
    config = task_config(args.config_file, args.config, args.volume)
    if entrypoint:
        config["entrypoint"] = entrypoint
    if not config.get("entrypoint"):
        raise UsageError("give the command to run: det cmd run CMD [ARG...]")
    s = session(args)
    cmd = s.post("/api/v1/commands", launch_body(args, config, s))["command"]
    if args.detach:
        print(cmd["id"])
        return 0
    print(f"Launched command (id: {cmd['id']})", file=sys.stderr)
    follow_logs(s, cmd["id"])
    ended = wait_ended(s, f"/api/v1/commands/{cmd['id']}", "command")
    code = ended.get("exitCode")
    if ended["state"] != "STATE_TERMINATED":
        raise CliError(f"command {cmd['id']} has not ended; det cmd logs -f {cmd['id']}")
    if code is None:
        raise CliError(f"command {cmd['id']}: {ended.get('exitStatus') or 'ended'}")
    return int(code) if 0 <= int(code) < 256 else 1


def list_tasks(args: argparse.Namespace, plural: str) -> None:
    s = session(args)
    params: dict[str, QueryValue] = {}
    if not args.all:
        params["users"] = s.user
    items = s.get(f"/api/v1/{plural}", params=params)[plural]
    if args.quiet:
        for it in items:
            print(it["id"])
        return
    if args.json:
        render.print_json(items)
        return
    render.table(
        ["ID", "User", "Description", "State", "Exit Status", "Resource Pool"],
        [
            [
                it["id"],
                it["username"],
                it["description"],
                render.state(it["state"]),
                it.get("exitStatus") or "",
                it["resourcePool"],
            ]
            for it in items
        ],
    )


def kill_tasks(args: argparse.Namespace, plural: str, ids: list[str], name: str) -> None:
    s = session(args)
    for task_id in ids:
        try:
            s.post(f"/api/v1/{plural}/{task_id}/kill")
        except CliError as e:
            if not args.force:
                raise
            print(f"skipping {name} {task_id}: {e}", file=sys.stderr)
            continue
        print(f"killed {name} {task_id}")


def logs(args: argparse.Namespace) -> None:
    params: dict[str, QueryValue] = {"follow": str(args.follow).lower()}
    if args.tail:
        params.update({"limit": args.tail, "orderBy": "ORDER_BY_DESC"})
        entries = list(session(args).stream(f"/api/v1/tasks/{args.task_id}/logs", params=params))
        for entry in reversed(entries):
            _print_entry(entry)
        return
    if args.head:
        params["limit"] = args.head
    s = session(args)

    def ended() -> bool:
        return not args.follow or bool(args.head) or task_ended(s, args.task_id)

    for entry in s.follow(f"/api/v1/tasks/{args.task_id}/logs", params, ended):
        _print_entry(entry)


def add_list_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("-a", "--all", action="store_true", help="other users' too")
    p.add_argument("-q", "--quiet", action="store_true", help="only the ids")
    add_json(p)


def add_list_verb(sub: Any, kind: str, what: str) -> None:
    """``det <kind> list``, shared by the interactive task kinds (``kind`` as in the API's
    path, singular; ``what`` as the help and messages name it)."""
    p = verb(sub, "list ls", lambda a: list_tasks(a, f"{kind}s"), f"list {what}s")
    add_list_flags(p)


def add_logs_and_kill_verbs(sub: Any, kind: str, what: str) -> None:
    """``det <kind> logs ID`` and ``det <kind> kill ID...``."""
    key = f"{kind}_id"
    p = verb(sub, "logs", logs, f"show a {what}'s logs")
    p.add_argument("task_id", metavar=key)
    add_log_flags(p)
    p = verb(
        sub, "kill", lambda a: kill_tasks(a, f"{kind}s", getattr(a, key), what), f"kill {what}s"
    )
    p.add_argument(key, nargs="+")
    p.add_argument("-f", "--force", action="store_true", help="go on past errors")


def set_priority(args: argparse.Namespace, kind: str, what: str) -> None:
    """Determined's ``det <kind> set priority ID N``: the task's job gets priority N (1-99;
    the master names the field when it refuses)."""
    task_id = getattr(args, f"{kind}_id")
    session(args).post(
        f"/api/v1/{kind}s/{task_id}/set_priority", {f"{kind}Id": task_id, "priority": args.priority}
    )
    print(f"Set priority of {what} {task_id} to {args.priority}")


def add_set_verb(sub: Any, kind: str, what: str) -> None:
    """``det <kind> set priority ID N``, shared by the interactive task kinds (the official
    client's ``set`` with its one attribute)."""
    attrs = noun(sub, "set", {}, f"set {what} attributes")
    q = verb(attrs, "priority", lambda a: set_priority(a, kind, what), f"set a {what}'s priority")
    q.add_argument(f"{kind}_id", help=f"the {what}'s id")
    q.add_argument("priority", type=int, help="the new priority (1-99; 1 is the highest)")


def show_config(args: argparse.Namespace, kind: str) -> None:
    """Determined's ``det <kind> config ID``: the task's config as YAML."""
    config = session(args).get(f"/api/v1/{kind}s/{getattr(args, f'{kind}_id')}")["config"]
    print(yaml.safe_dump(config, sort_keys=True), end="")


def add_config_verb(sub: Any, kind: str, what: str) -> None:
    p = verb(sub, "config", lambda a: show_config(a, kind), f"show a {what}'s config")
    p.add_argument(f"{kind}_id", help=f"the {what}'s id")


# Determined's ``det command describe`` columns (its command table's field names).
DESCRIBE = ["id", "username", "description", "state", "exitStatus", "resourcePool"]


def describe(args: argparse.Namespace) -> None:
    """Determined's ``det command describe ID [--json|--csv]``: the command's record, its state
    without ``STATE_`` and its workspace's name beside its id."""
    s = session(args)
    item = s.get(f"/api/v1/commands/{args.command_id}")["command"]
    item["state"] = str(item.get("state") or "").removeprefix("STATE_")
    if item.get("workspaceId") is not None:
        found = s.get(f"/api/v1/workspaces/{item['workspaceId']}")["workspace"]
        item["workspaceName"] = found["name"]
    if args.json:
        render.print_json(item)
        return
    headers = [*DESCRIBE, "workspaceName"]
    render.rows(headers, [[item.get(h, "") for h in headers]], args.csv)


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "command", aliases, "run commands on the cluster")
    p = verb(sub, "run", run, "run a command and stream its output; exits with its code")
    p.add_argument("entrypoint", nargs=argparse.REMAINDER, help="the command and its arguments")
    add_launch_flags(p)
    add_list_verb(sub, "command", "command")
    add_logs_and_kill_verbs(sub, "command", "command")
    add_set_verb(sub, "command", "command")
    add_config_verb(sub, "command", "command")
    p = verb(sub, "describe", describe, "show a command's record")
    p.add_argument("command_id", help="the command's id")
    output = p.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print JSON")
    output.add_argument("--csv", action="store_true", help="print as CSV")
