"""The tail of an AWS cluster's boot logs in CloudWatch Logs (``det deploy aws status``).

It calls DescribeLogStreams and GetLogEvents only: ``iam.LOG_READ_ACTIONS``, the documented
grant (docs/deploy.md) and the test that records these calls must change together.

Every machine ships its boot log (and the master its service log) to the group
``/det/<cluster id>``, one stream per machine and file (``common.logship``); the tail merges
the streams written last.
"""

from __future__ import annotations

from typing import Any

from det.deploy.common.errors import DeployError

# How many of the most recently written streams are read (the master's two and a few agents').
_STREAMS = 6


def tail(logs: Any, group: str, lines: int) -> list[str]:
    """The last ``lines`` events of ``group``'s most recent streams, oldest first, each as
    ``TIME [stream] message``; ``logs`` is a boto3 CloudWatch Logs client."""
    try:
        streams = logs.describe_log_streams(
            logGroupName=group, orderBy="LastEventTime", descending=True, limit=_STREAMS
        )["logStreams"]
        events: list[tuple[int, str, str]] = []
        for stream in streams:
            name = stream["logStreamName"]
            answer = logs.get_log_events(
                logGroupName=group, logStreamName=name, limit=lines, startFromHead=False
            )
            events += [(e["timestamp"], name, e["message"]) for e in answer["events"]]
    except logs.exceptions.ResourceNotFoundException:
        raise DeployError(
            f"the log group {group} does not exist (deleted with the stack?)"
        ) from None
    events.sort(key=lambda e: e[0])
    return [f"{_time(ts)} [{name}] {message.rstrip()}" for ts, name, message in events[-lines:]]


def _time(ms: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
