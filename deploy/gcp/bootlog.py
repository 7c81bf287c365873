"""The tail of a GCP cluster's boot logs in Cloud Logging (``det deploy gcp status``).

The machines write the log ``det-boot`` (``common.logship``), each entry labelled with its
instance; ``entries:list`` returns the newest first, so the tail is one request.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from det.deploy.common.errors import DeployError

ENDPOINT = "https://logging.googleapis.com"


def endpoint() -> str:
    """``DET_LOGGING_ENDPOINT`` (a fake in tests, as for the log shipper), else Google's."""
    return os.environ.get("DET_LOGGING_ENDPOINT", ENDPOINT)


def tail(
    post: Callable[..., Any], project: str, log_name: str, cluster_id: str, lines: int
) -> list[str]:
    """The last ``lines`` entries of the cluster's machines, oldest first, each as
    ``TIME [instance] text``; ``post`` is an authorized session's ``post``."""
    body = {
        "resourceNames": [f"projects/{project}"],
        "filter": (
            f'logName="projects/{project}/logs/{log_name}" '
            f'AND (labels.instance:"det-master-{cluster_id}" '
            f'OR labels.instance:"det-agent-{cluster_id}-")'
        ),
        "orderBy": "timestamp desc",
        "pageSize": lines,
    }
    response = post(f"{endpoint()}/v2/entries:list", json=body, timeout=30)
    if response.status_code != 200:
        raise DeployError(
            f"Cloud Logging answered HTTP {response.status_code} for the log {log_name}"
        )
    entries = response.json().get("entries") or []
    return [
        f"{e.get('timestamp', '')[:19]}Z [{(e.get('labels') or {}).get('instance', '-')}] "
        f"{str(e.get('textPayload', '')).rstrip()}"
        for e in reversed(entries[:lines])
    ]
