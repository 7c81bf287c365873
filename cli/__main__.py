"""``det``: the command line of det, with Determined's nouns, verbs and flags.

Every command module registers its sub-commands; this module parses, dispatches, and is the one
place where exceptions become a readable line and an exit code (traceback only with --debug).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

import det
from det.cli import (
    agents,
    checkpoints,
    commands,
    deploy,
    experiments,
    jobs,
    master,
    models,
    notebooks,
    projects,
    rbac,
    resources,
    search,
    shells,
    tasks,
    templates,
    tensorboards,
    tokens,
    trials,
    user_groups,
    users,
    webhooks,
    workspaces,
)
from det.cli.errors import CliError, translate
from det.common.errors import HarnessError

# Determined's short aliases.
NOUN_ALIASES = {
    "experiment": ["e", "exp", "experiments"],
    "trial": ["t", "trials"],
    "agent": ["a", "agents"],
    "slot": ["s", "slots"],
    "job": ["j", "jobs"],
    "checkpoint": ["c", "checkpoints"],
    "model": ["m", "models"],
    "resource-pool": ["rp", "resource-pools"],
    "user": ["u", "users"],
    "workspace": ["w", "workspaces"],
    "project": ["p", "projects"],
    "template": ["tpl", "templates"],
    "token": ["tkn"],
    "command": ["cmd", "commands"],
    "task": ["tasks"],
    "notebook": ["notebooks"],
    "shell": ["shells"],
    "tensorboard": ["tensorboards"],
    "resources": ["res"],
    "master": [],
    "deploy": ["d"],
    "webhook": ["webhooks"],
}


def _wants_deploy(argv: list[str] | None) -> bool:
    words = sys.argv[1:] if argv is None else argv
    return any(w in ("deploy", *NOUN_ALIASES["deploy"]) for w in words)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole ``det`` parser. ``det deploy``'s sub-commands import the cloud SDKs (a quarter
    of a second), so they are only built when ``argv`` asks for them."""
    parser = argparse.ArgumentParser(
        prog="det", description="det: a cluster platform for deep-learning training."
    )
    parser.add_argument(
        "-m", "--master", help="master URL (default: $DET_MASTER or http://127.0.0.1:8080)"
    )
    parser.add_argument(
        "-u", "--user", help="run as this user (default: the cached active user or $DET_USER)"
    )
    parser.add_argument("--debug", action="store_true", help="print tracebacks on errors")
    parser.add_argument("--version", action="store_true", help="print the client version")
    nouns = parser.add_subparsers(dest="noun", metavar="COMMAND")
    for module in (users, master, experiments, trials, jobs, agents, checkpoints, models, search):
        module.register(nouns, NOUN_ALIASES)
    for module in (
        tokens,
        workspaces,
        projects,
        templates,
        commands,
        notebooks,
        shells,
        tasks,
        tensorboards,
        resources,
        webhooks,
        rbac,
        user_groups,
    ):
        module.register(nouns, NOUN_ALIASES)
    deploy.register(nouns, NOUN_ALIASES, full=_wants_deploy(argv))
    return parser


def _token_as_operand(argv: list[str]) -> list[str]:
    """``det token login TOKEN`` where TOKEN begins with ``-`` (one token in 64 does): argparse
    would take it for an option, so a ``--`` goes before it. ``det token login -- TOKEN`` and
    ``-h``/``--help`` are left alone."""
    for i in range(len(argv) - 2):
        if argv[i] in ("token", *NOUN_ALIASES["token"]) and argv[i + 1] == "login":
            operand = argv[i + 2]
            if operand.startswith("-") and operand not in ("--", "-h", "--help"):
                return [*argv[: i + 2], "--", *argv[i + 2 :]]
            break
    return argv


def main(argv: list[str] | None = None) -> int:
    argv = _token_as_operand(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if args.version:
        print(f"det {det.__version__}")
        return 0
    func: Callable[[argparse.Namespace], Any] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        result = func(args)
        return int(result or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader (head, less…) went away: not an error. Point stdout at devnull so the
        # interpreter's final flush does not complain again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (CliError, HarnessError) as e:
        if args.debug:
            raise
        cli_error = e if isinstance(e, CliError) else translate(e)
        print(f"det: error: {cli_error}", file=sys.stderr)
        return int(cli_error.exit_code)
    except Exception as e:  # anything unexpected: still one line unless --debug
        if args.debug:
            raise
        print(
            f"det: error: {type(e).__name__}: {e} (run with --debug for details)", file=sys.stderr
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
