"""``det job``: the job queue."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, cast

from det.cli import render
from det.cli._util import add_json, noun, session, verb
from det.cli.errors import UsageError
from det.cli.session import QueryValue

if TYPE_CHECKING:
    from det.master.schemas import d


def _state(job: d.v1Job) -> str:
    summary = job.get("summary")
    return summary["state"] if summary else "STATE_UNSPECIFIED"


def list_(args: argparse.Namespace) -> None:
    params: dict[str, QueryValue] = {"orderBy": "ORDER_BY_DESC" if args.reverse else "ORDER_BY_ASC"}
    if args.resource_pool:
        params["resourcePool"] = args.resource_pool
    queue = cast("d.v1GetJobsV2Response", session(args).get("/api/v1/job-queues-v2", params=params))
    # ``limited`` jobs (no details for this user) have no row; det sends every job in full.
    jobs = [full for j in queue["jobs"] if (full := j.get("full"))]
    if args.json:
        render.print_json({"jobs": jobs})
        return
    render.table(
        [
            "#",
            "ID",
            "Type",
            "Job Name",
            "Priority",
            "Submitted",
            "Slots (acquired/needed)",
            "State",
            "User",
            "Waiting Because",
        ],
        [
            [
                i,
                j["jobId"],
                j["type"].removeprefix("TYPE_"),
                f"{j['name']} ({j['entityId']})",
                j.get("priority"),
                render.when(j["submissionTime"]),
                f"{j['allocatedSlots']}/{j['requestedSlots']}",
                render.state(_state(j)),
                j["username"],
                j.get("pendingReason") or "",
            ]
            for i, j in enumerate(jobs)
        ],
    )


def _update(args: argparse.Namespace, job_id: str, fields: dict[str, Any]) -> None:
    session(args).post("/api/v1/job-queues", {"updates": [{"jobId": job_id, **fields}]})


def update(args: argparse.Namespace) -> None:
    fields: dict[str, Any] = {}
    if args.priority is not None:
        fields["priority"] = args.priority
    if args.weight is not None:
        fields["weight"] = args.weight
    if args.resource_pool:
        fields["resourcePool"] = args.resource_pool
    if args.ahead_of:
        fields["aheadOf"] = args.ahead_of
    if args.behind_of:
        fields["behindOf"] = args.behind_of
    if not fields:
        raise UsageError(
            "nothing to update: give --priority, --weight, --resource-pool, --ahead-of or --behind-of"
        )
    _update(args, args.job_id, fields)
    print(f"updated job {args.job_id}")


_FIELDS = {
    "priority": ("priority", int),
    "weight": ("weight", float),
    "resource-pool": ("resourcePool", str),
    "ahead-of": ("aheadOf", str),
    "behind-of": ("behindOf", str),
}


def update_batch(args: argparse.Namespace) -> None:
    updates = []
    for op in args.operations:
        job_and_field, eq, value = op.partition("=")
        job_id, dot, field = job_and_field.partition(".")
        if not eq or not dot or field not in _FIELDS:
            raise UsageError(
                f"{op!r}: expected JOB_ID.FIELD=VALUE with FIELD one of {', '.join(_FIELDS)}"
            )
        key, conv = _FIELDS[field]
        try:
            updates.append({"jobId": job_id, key: conv(value)})
        except ValueError:
            raise UsageError(f"{op!r}: {field} must be a {conv.__name__}") from None
    session(args).post("/api/v1/job-queues", {"updates": updates})
    print(f"applied {len(updates)} updates")


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "job", aliases, "the job queue")
    p = verb(sub, "list ls", list_, "list the job queue")
    p.add_argument("--resource-pool", "-r")
    p.add_argument("--reverse", action="store_true")
    add_json(p)
    p = verb(sub, "update", update, "change a job's priority, weight, pool or queue position")
    p.add_argument("job_id")
    p.add_argument("--priority", "-p", type=int)
    p.add_argument("--weight", "-w", type=float)
    p.add_argument("--resource-pool")
    p.add_argument("--ahead-of")
    p.add_argument("--behind-of")
    p = verb(
        sub,
        "update-batch",
        update_batch,
        "apply several updates: JOB_ID.priority=1 JOB_ID2.resource-pool=x …",
    )
    p.add_argument("operations", nargs="+")
