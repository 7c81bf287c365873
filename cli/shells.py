"""``det shell``: an SSH shell in a task container, through the master (the CLI is SSH's
``ProxyCommand``, with the shell's own key pair); list, kill, show_ssh_command."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from det.cli import tunnel
from det.cli._util import noun, session, verb
from det.cli.commands import (
    add_config_verb,
    add_launch_flags,
    add_list_verb,
    add_logs_and_kill_verbs,
    add_set_verb,
    launch_body,
    task_config,
)
from det.cli.errors import CliError
from det.cli.notebooks import wait_ready
from det.cli.session import Session


def _ssh_argv(
    s: Session, shell: dict[str, Any], keyfile: Path, args: argparse.Namespace
) -> list[str]:
    proxy = [sys.executable, "-m", "det.cli", "-m", s.master]
    if s.user:
        proxy += ["-u", s.user]
    proxy += ["shell", "tunnel", shell["id"]]
    return [
        "ssh",
        "-o", f"ProxyCommand={shlex.join(proxy)}",
        "-o", "StrictHostKeyChecking=no",
        "-o", "UserKnownHostsFile=/dev/null",
        "-o", "LogLevel=ERROR",
        "-o", "IdentitiesOnly=yes",
        "-i", str(keyfile),
        *(getattr(args, "ssh_opts", None) or []),
        f"root@{shell['id']}",
    ]  # fmt: skip


def _keyfile(shell: dict[str, Any], directory: str) -> Path:
    key = shell.get("privateKey")
    if not key:
        raise CliError(f"shell {shell['id']}: only its owner or an admin gets its key")
    path = Path(directory) / f"shell-{shell['id']}.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key)
    return path


def _open(s: Session, shell: dict[str, Any], args: argparse.Namespace, command: list[str]) -> int:
    wait_ready(s, shell["id"], "shell")
    with tempfile.TemporaryDirectory(prefix="det-shell-") as tmp:
        argv = _ssh_argv(s, shell, _keyfile(shell, tmp), args)
        if command:
            argv.append(shlex.join(command))
        return subprocess.call(argv)


def start(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    config = task_config(args.config_file, args.config, args.volume)
    s = session(args)
    shell = s.post("/api/v1/shells", launch_body(args, config, s))["shell"]
    if args.detach:
        print(shell["id"])
        return 0
    print(f"Launched shell (id: {shell['id']})", file=sys.stderr)
    return _open(s, shell, args, command)


def open_(args: argparse.Namespace) -> int:
    s = session(args)
    shell = s.get(f"/api/v1/shells/{args.shell_id}")["shell"]
    command = list(args.command)
    return _open(s, shell, args, command[1:] if command[:1] == ["--"] else command)


def show_ssh_command(args: argparse.Namespace) -> None:
    s = session(args)
    shell = s.get(f"/api/v1/shells/{args.shell_id}")["shell"]
    directory = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "det"
    directory.mkdir(parents=True, exist_ok=True)
    print(shlex.join(_ssh_argv(s, shell, _keyfile(shell, str(directory)), args)))


def tunnel_(args: argparse.Namespace) -> None:
    s = session(args)
    sock, rest = tunnel.connect(s.master, f"/proxy/{args.shell_id}/", s.token or "")
    tunnel.relay(sock, rest)


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "shell", aliases, "SSH shells in task containers")
    p = verb(sub, "start", start, "start a shell and open it (or run -- CMD in it)")
    add_launch_flags(p)
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD: run CMD instead of a shell")
    p = verb(sub, "open", open_, "open a running shell (or run -- CMD in it)")
    p.add_argument("shell_id")
    p.add_argument("command", nargs=argparse.REMAINDER)
    p = verb(sub, "show_ssh_command show-ssh-command", show_ssh_command, "print the ssh command")
    p.add_argument("shell_id")
    add_list_verb(sub, "shell", "shell")
    add_logs_and_kill_verbs(sub, "shell", "shell")
    add_set_verb(sub, "shell", "shell")
    add_config_verb(sub, "shell", "shell")
    p = verb(sub, "tunnel", tunnel_, "carry stdin/stdout to the shell (ssh's ProxyCommand)")
    p.add_argument("shell_id")
