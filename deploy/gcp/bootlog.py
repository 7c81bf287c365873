"""The tails of a GCP cluster's boot logs in Cloud Logging (``det deploy gcp status``).

The machines write the log ``det-boot`` (``common.logship``), each entry labelled with its
instance and file. The tails are per machine and per file: one ``entries:list`` finds the
agents that wrote last, then one per file of the master and of each of those agents reads its
newest entries (``entries:list`` answers newest first with ``orderBy: timestamp desc``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from det.common.jsontypes import JSONValue
from det.deploy.common.errors import DeployError
from det.deploy.common.status import (
    AGENT_FILE,
    BOOT_FILE,
    DEFAULT_AGENTS,
    MASTER_FILE,
    MachineLog,
)

ENDPOINT = "https://logging.googleapis.com"
# entries:list's largest page (https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/list).
_PAGE = 1000


@dataclasses.dataclass(frozen=True)
class _Entry:
    """What is read of a Cloud Logging ``LogEntry``."""

    instance: str
    """Its ``labels.instance``: the machine that wrote it."""
    timestamp: str
    text: str


def _entry(raw: JSONValue) -> _Entry:
    e = raw if isinstance(raw, dict) else {}
    labels = e.get("labels")
    instance = labels.get("instance", "") if isinstance(labels, dict) else ""
    return _Entry(str(instance), str(e.get("timestamp", "")), str(e.get("textPayload", "")))


def endpoint() -> str:
    """``DET_LOGGING_ENDPOINT`` (a fake in tests, as for the log shipper), else Google's."""
    return os.environ.get("DET_LOGGING_ENDPOINT", ENDPOINT)


def tail(
    post: Callable[..., Any],
    project: str,
    log_name: str,
    cluster_id: str,
    lines: int,
    *,
    master: str | None = None,
    agents: int = DEFAULT_AGENTS,
) -> list[MachineLog]:
    """The master's (instance ``master``, by default ``det-master-<cluster id>``) and the ``agents`` most recently written agents' logs, each file's last
    ``lines`` entries; ``post`` is an authorized session's ``post``. The master comes first,
    then the agents, the most recently written first."""
    log = f'logName="projects/{project}/logs/{log_name}"'

    def newest(filter_: str, size: int) -> list[_Entry]:
        body = {
            "resourceNames": [f"projects/{project}"],
            "filter": f"{log} AND {filter_}",
            "orderBy": "timestamp desc",
            "pageSize": size,
        }
        response = post(f"{endpoint()}/v2/entries:list", json=body, timeout=30)
        if response.status_code != 200:
            raise DeployError(
                f"Cloud Logging answered HTTP {response.status_code} for the log {log_name}"
            )
        entries = response.json().get("entries") or []
        return [_entry(e) for e in entries[:size]]

    recent: list[str] = []
    if agents:
        for entry in newest(f'labels.instance:"det-agent-{cluster_id}-"', _PAGE):
            name = entry.instance
            if name.startswith(f"det-agent-{cluster_id}-") and name not in recent:
                recent.append(name)
    chosen = [(master or f"det-master-{cluster_id}", "master", MASTER_FILE)] + [
        (name, "agent", AGENT_FILE) for name in recent[:agents]
    ]
    machines = []
    for instance, role, service in chosen:
        files = {}
        for file in (BOOT_FILE, service):
            entries = newest(f'labels.instance="{instance}" AND labels.file="{file}"', lines)
            if entries:
                files[file] = [(f"{e.timestamp[:19]}Z", e.text.rstrip()) for e in reversed(entries)]
        if files:
            machines.append(MachineLog(instance, role, files))
    return machines
