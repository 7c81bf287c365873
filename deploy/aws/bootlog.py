"""The tails of an AWS cluster's boot logs in CloudWatch Logs (``det deploy aws status``).

It calls EC2 DescribeInstances and CloudWatch Logs DescribeLogStreams and GetLogEvents only:
``iam.STATUS_READ_ACTIONS``, the documented grant (docs/deploy.md) and the test that records
these calls must change together.

Every machine ships its boot log (and its service's log) to the group ``/det/<cluster id>``,
one stream per machine and file, ``<instance id>/<file>`` (``common.logship``). The tails are
per machine and per file: the master's streams (found by its instance id), then the cluster's
agents that run now (EC2, by the cluster's tag, the newest first), then those of the newest
streams, each stream's own last lines. The agents come from EC2 because a stream's
``lastEventTimestamp`` is eventually consistent ("typically updates in less than an hour",
DescribeLogStreams): ordered by it alone, a booting agent could be missing for an hour.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from det.deploy.aws.config import CLUSTER_TAG
from det.deploy.common.errors import DeployError
from det.deploy.common.status import DEFAULT_AGENTS, MachineLog, file_order, role_of

# The newest streams read to find the machines that wrote last (DescribeLogStreams' largest
# page: https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_DescribeLogStreams.html).
_NEWEST = 50


def tail(
    logs: Any,
    group: str,
    lines: int,
    *,
    master: str | None = None,
    agents: int = DEFAULT_AGENTS,
    ec2: Any = None,
    cluster_id: str | None = None,
) -> list[MachineLog]:
    """The master's (instance id ``master``) and ``agents`` other machines' logs, each stream's
    last ``lines`` events; ``logs`` and ``ec2`` are boto3 clients. The master comes first, then
    the cluster's live agents (with ``ec2`` and ``cluster_id``), the newest first, then the
    machines whose streams were written last."""
    live = _live_agents(ec2, cluster_id) if ec2 is not None and cluster_id else []
    live = [i for i in live if i != master]
    try:
        newest = logs.describe_log_streams(
            logGroupName=group, orderBy="LastEventTime", descending=True, limit=_NEWEST
        )["logStreams"]
        streams: dict[str, list[str]] = {}
        for stream in newest:
            machine = stream["logStreamName"].partition("/")[0]
            streams.setdefault(machine, []).append(stream["logStreamName"])
        for machine in ([master] if master else []) + live[:agents]:
            if machine not in streams:
                # Not among the newest (DescribeLogStreams takes a prefix only when ordered by
                # name, not by time).
                found = logs.describe_log_streams(
                    logGroupName=group, logStreamNamePrefix=f"{machine}/"
                )["logStreams"]
                if found:
                    streams[machine] = [s["logStreamName"] for s in found]
        recent = [m for m in live if m in streams] + list(streams)
        others = list(dict.fromkeys(m for m in recent if m != master))[:agents]
        chosen = ([master] if master in streams else []) + others
        machines = []
        for machine in chosen:
            files: dict[str, list[tuple[str, str]]] = {}
            for name in sorted(streams[machine], key=lambda n: file_order(_file(n))):
                answer = logs.get_log_events(
                    logGroupName=group, logStreamName=name, limit=lines, startFromHead=False
                )
                files[_file(name)] = [
                    (_time(e["timestamp"]), e["message"].rstrip()) for e in answer["events"]
                ][-lines:]
            machines.append(MachineLog(machine, role_of(machine, list(files), master), files))
    except logs.exceptions.ResourceNotFoundException:
        raise DeployError(
            f"the log group {group} does not exist (deleted with the stack?)"
        ) from None
    return machines


def _live_agents(ec2: Any, cluster_id: str) -> list[str]:
    """The cluster's agents that are not terminated, the last launched first (the master is
    tagged with the cluster too and is left out by the caller)."""
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster_id]},
            {"Name": "instance-state-name", "Values": ["pending", "running", "stopping"]},
        ]
    )
    try:
        found = [i for page in pages for r in page["Reservations"] for i in r["Instances"]]
    except ec2.exceptions.ClientError as e:
        if e.response.get("Error", {}).get("Code") != "UnauthorizedOperation":
            raise
        return []  # a reader without ec2:DescribeInstances sees the newest streams only
    found.sort(key=lambda i: i["LaunchTime"], reverse=True)
    return [str(i["InstanceId"]) for i in found]


def _file(stream: str) -> str:
    return stream.partition("/")[2] or stream


def _time(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
