"""``det deploy local up|down|status``: flags and handlers (print results, return exit codes).

Integration: ``add_parsers(deploy_subparsers)`` registers ``local``; each verb's parser gets
``func`` taking the parsed namespace and returning the exit code. Errors are one line on stderr
(traceback with ``--debug``) and exit code 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from det.deploy.common.errors import DeployError
from det.deploy.local import cluster


def _say(message: str) -> None:
    print(message, flush=True)


def _guarded(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except DeployError as e:
            if getattr(args, "debug", False):
                traceback.print_exc()
            print(f"det deploy local: error: {e}", file=sys.stderr, flush=True)
            return 1

    return handler


def _state_dir(args: argparse.Namespace) -> Path | None:
    value = getattr(args, "state_dir", None)
    return Path(value) if value else None


def cmd_up(args: argparse.Namespace) -> int:
    c = cluster.up(
        agents=args.agents,
        slots_per_agent=args.slots_per_agent,
        master_port=args.master_port,
        initial_user_password=args.initial_user_password,
        state_dir=_state_dir(args),
        images=not args.no_images,
        progress=_say,
        mount_roots=args.allow_mount or (),
    )
    if c.already_running:
        _say(f"a local cluster is already running at {c.master_url} (state in {c.state_dir})")
    else:
        _say(f"local cluster up: master {c.master_url}, agents {', '.join(c.agent_ids) or 'none'}")
    if c.generated_password is not None:
        _say(f"admin password (shown once; also in {c.password_file}): {c.generated_password}")
    _say("to use it:")
    _say(f"  export DET_MASTER={c.master_url}")
    _say(f"  det user login admin        # password: cat {c.password_file}")
    _say(f"  WebUI: {c.master_url}/det/")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    r = cluster.down(delete_data=args.delete_data, state_dir=_state_dir(args), progress=_say)
    if not r["master"] and not r["agents"]:
        _say("no local cluster was running")
    else:
        stopped = ["master"] if r["master"] else []
        stopped += r["agents"]
        _say(f"stopped: {', '.join(stopped)}; task containers removed: {r['containers']}")
    if r["deleted"]:
        _say("deleted the cluster's data (experiments, checkpoints, password)")
    elif r["master"] or r["agents"]:
        _say(
            "data kept; 'det deploy local up' continues where it stopped (--delete-data removes it)"
        )
    return 0


def _status_text(s: cluster.Status) -> str:
    m = s["master"]
    lines = [f"state directory: {s['state_dir']}"]
    if not m["running"]:
        lines.append("master: not running")
    else:
        lines.append(
            f"master: {m['url']} (pid {m['pid']}, {'answering' if m['answering'] else 'not answering'})"
        )
    for a in s["agents"]:
        run = f"pid {a['pid']}" if a["running"] else "not running"
        reg = f"registered, {a['slots']} slot(s)" if a["registered"] else "not registered"
        lines.append(f"agent {a['id']}: {run}, {reg}")
    return "\n".join(lines)


def cmd_status(args: argparse.Namespace) -> int:
    s = cluster.status(state_dir=_state_dir(args))
    _say(json.dumps(s, indent=2) if args.json else _status_text(s))
    return 0 if s["running"] else 3


def _state_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--state-dir",
        help="where the cluster keeps its state (default: $DET_LOCAL_STATE_DIR, else"
        " $XDG_DATA_HOME/det/local or ~/.local/share/det/local)",
    )


def add_parsers(deploy_subparsers: Any) -> None:
    """Register ``local`` with ``up|cluster-up``, ``down|cluster-down`` and ``status``."""
    local = deploy_subparsers.add_parser("local", help="a cluster on this machine (needs Docker)")
    verbs = local.add_subparsers(dest="verb", metavar="{up,down,status}", required=True)

    up = verbs.add_parser("up", aliases=["cluster-up"], help="start the master and agents")
    up.add_argument("--agents", type=int, default=1, help="number of agents (default 1)")
    up.add_argument(
        "--slots-per-agent", type=int, default=1, help="artificial CPU slots per agent (default 1)"
    )
    up.add_argument("--master-port", type=int, default=8080, help="master port (default 8080)")
    up.add_argument(
        "--initial-user-password",
        help="password of the admin and determined users (default: generated, shown once)",
    )
    up.add_argument(
        "--no-images", action="store_true", help="do not build the task image when missing"
    )
    up.add_argument(
        "--allow-mount",
        action="append",
        metavar="PATH[:ro|:rw]",
        help="a host directory non-admins' tasks may bind-mount (or what is under it),"
        " read-only unless :rw; repeatable (default: none besides the checkpoint directory)",
    )
    _state_flag(up)
    up.set_defaults(func=_guarded(cmd_up))

    down = verbs.add_parser("down", aliases=["cluster-down"], help="stop the cluster")
    down.add_argument(
        "--delete-data",
        action="store_true",
        help="also delete the data: experiments, checkpoints, logs and the password",
    )
    _state_flag(down)
    down.set_defaults(func=_guarded(cmd_down))

    st = verbs.add_parser("status", help="what runs (exit 3 when the master is not running)")
    st.add_argument("--json", action="store_true", help="print JSON")
    _state_flag(st)
    st.set_defaults(func=_guarded(cmd_status))
