"""``det master policy``: the cluster's task container policy (show, set FILE, history).

The master stores what ``set`` sends and applies it to the next task container without a
restart (docs/security.md, "The container policy at run time"). FILE is the policy as YAML,
the value of master.yaml's ``task_container_policy`` key, or a master.yaml itself (its
``task_container_policy`` is taken), so ``det master policy set master.yaml`` stores the file's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from det.cli import render
from det.cli._util import add_json, session, shows_help, verb
from det.cli.errors import UsageError
from det.common.jsontypes import JSONObject

PATH = "/api/v1/master/task-container-policy"
KEY = "task_container_policy"


def read_policy(path: str) -> JSONObject:
    """The policy in ``path`` (see the module's docstring); UsageError naming what is wrong."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise UsageError(f"cannot read policy file {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise UsageError(f"{path}: not valid YAML: {e}") from None
    if data is None:
        data = {}
    if isinstance(data, dict) and KEY in data:
        data = data[KEY] if data[KEY] is not None else {}
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a policy is a YAML mapping (task_container_policy's keys)")
    return data


def show(args: argparse.Namespace) -> None:
    body = session(args).get(PATH)
    if args.json:
        render.print_json(body)
        return
    if body["source"] == "database":
        print(
            f"# stored by {body['updatedBy']} at {body['updatedAt']} (master.yaml's does not apply)"
        )
    else:
        print("# master.yaml's (no admin has stored one)")
    print(yaml.safe_dump({KEY: body["policy"]}, default_flow_style=False, sort_keys=False), end="")


def set_(args: argparse.Namespace) -> None:
    body = session(args).put(PATH, {"policy": read_policy(args.file)})
    print(f"task container policy stored by {body['updatedBy']} at {body['updatedAt']}")


def history(args: argparse.Namespace) -> None:
    changes = session(args).get(PATH + "/history")
    if args.json:
        render.print_json(changes)
        return
    render.table(
        ["ID", "Updated at", "Updated by", "Policy"],
        [
            [
                c["id"],
                c["updatedAt"],
                c["updatedBy"],
                json.dumps(c["policy"], separators=(",", ":")),
            ]
            for c in changes
        ],
    )


def register(master: Any) -> None:
    """``policy`` under ``det master`` (``master``: its verbs' subparsers)."""
    p = master.add_parser("policy", help="the task container policy (admins change it)")
    p.set_defaults(func=shows_help(p))
    sub = p.add_subparsers(dest="policy_verb", metavar="VERB")
    add_json(verb(sub, "show", show, "show the cluster's task container policy"))
    s = verb(sub, "set", set_, "store a task container policy from a YAML file (admins)")
    s.add_argument("file", metavar="FILE.yaml", help="the policy, or a master.yaml holding one")
    add_json(verb(sub, "history", history, "list the policy's changes, newest first (admins)"))
