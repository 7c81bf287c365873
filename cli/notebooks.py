"""``det notebook``: start JupyterLab on the cluster and reach it through the master's proxy;
list, logs, kill."""

from __future__ import annotations

import argparse
import sys
import time
import webbrowser
from typing import TYPE_CHECKING, Any, cast

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
from det.cli.session import Session

if TYPE_CHECKING:
    from det.master.schemas import d


def wait_ready(s: Session, task_id: str, what: str, timeout: float = 600.0) -> None:
    """Waits until the task's service is up (its allocation ``isReady``) or it has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task = cast("d.v1GetTaskResponse", s.get(f"/api/v1/tasks/{task_id}"))["task"]
        if task.get("endTime"):
            raise CliError(f"{what} {task_id} ended before it was ready; det task logs {task_id}")
        allocs = task.get("allocations") or []
        if allocs and allocs[0].get("isReady"):
            return
        time.sleep(1.0)
    raise CliError(f"{what} {task_id} is not ready after {timeout:.0f} s; det task logs {task_id}")


def with_path(url: str, path: str) -> str:
    """A ticket's URL (``…/proxy/<id>/?det_ticket=…``) for ``path`` under the task."""
    base, _, query = url.partition("?")
    return f"{base}{path}?{query}"


def start(args: argparse.Namespace) -> None:
    config = task_config(args.config_file, args.config, args.volume)
    s = session(args)
    nb = s.post("/api/v1/notebooks", launch_body(args, config, s))["notebook"]
    if args.detach:
        print(nb["id"])
        return
    print(f"Launched notebook (id: {nb['id']}), waiting for it to be ready", file=sys.stderr)
    wait_ready(s, nb["id"], "notebook")
    url = f"{s.master.rstrip('/')}{nb['serviceAddress']}lab"
    print(f"JupyterLab is running at: {url}")
    if not args.no_browser:
        # A single-use ticket on the tasks' own origin; traded there for a cookie for this
        # notebook.
        opened = s.post("/api/v1/proxy_tickets", {"taskId": nb["id"]})
        webbrowser.open(with_path(opened["url"], "lab"))


def open_(args: argparse.Namespace) -> None:
    """Determined's ``det notebook open ID``: a running notebook's page in the browser."""
    s = session(args)
    task = cast("d.v1GetTaskResponse", s.get(f"/api/v1/tasks/{args.notebook_id}"))["task"]
    if task.get("endTime"):
        raise CliError(f"notebook {args.notebook_id} has ended")
    opened = s.post("/api/v1/proxy_tickets", {"taskId": args.notebook_id})
    url = with_path(opened["url"], "lab")
    print(f"Opening {url.partition('?')[0]}")
    webbrowser.open(url)


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "notebook", aliases, "JupyterLab on the cluster")
    p = verb(sub, "start", start, "start a notebook and print (or open) its URL")
    add_launch_flags(p)
    p.add_argument("--no-browser", action="store_true", help="only print the URL")
    p = verb(sub, "open", open_, "open a running notebook in the browser")
    p.add_argument("notebook_id")
    add_list_verb(sub, "notebook", "notebook")
    add_logs_and_kill_verbs(sub, "notebook", "notebook")
    add_set_verb(sub, "notebook", "notebook")
    add_config_verb(sub, "notebook", "notebook")
