"""``det task``: every live task on the cluster (trials, checkpoint GC, commands, notebooks,
shells, TensorBoards) and any task's logs."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, cast

from det.cli import render
from det.cli._util import add_json, noun, session, verb
from det.cli.commands import logs
from det.cli.experiments import add_log_flags

if TYPE_CHECKING:
    from det.master.schemas import d


def list_(args: argparse.Namespace) -> None:
    resp = cast("d.v1GetTasksResponse", session(args).get("/api/v1/tasks"))
    summaries = list((resp.get("allocationIdToSummary") or {}).values())
    if args.json:
        render.print_json(summaries)
        return
    render.table(
        ["Task ID", "Allocation ID", "Name", "Slots Needed", "Registered Time", "Agent", "Pool"],
        [
            [
                t.get("taskId"),
                t.get("allocationId"),
                t.get("name"),
                t.get("slotsNeeded"),
                render.when(t.get("registeredTime")),
                ", ".join(
                    sorted(
                        {a for r in t.get("resources") or [] for a in r.get("agentDevices") or {}}
                    )
                ),
                t.get("resourcePool"),
            ]
            for t in summaries
        ],
    )


def cleanup_logs(args: argparse.Namespace) -> None:
    removed = session(args).post("/api/v1/cleanup_logs").get("removedCount", "0")
    print(f"Deleted {removed} rows of log entries.")


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "task", aliases, "list tasks and show their logs")
    verb(sub, "cleanup-logs", cleanup_logs, "delete expired task logs now (admins)")
    p = verb(sub, "list ls", list_, "list the live tasks")
    add_json(p)
    p = verb(sub, "logs", logs, "show a task's logs")
    p.add_argument("task_id")
    add_log_flags(p)
