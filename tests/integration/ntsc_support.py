"""Interactive tasks a fuzzer launched by accident of a valid body: stopped before the next call,
so that their scheduling does not move the database under a check that nothing changed."""

from __future__ import annotations

import re
import time
from typing import Any

import requests

LAUNCH = re.compile(r"^POST /api/v1/(commands|notebooks|shells|tensorboards)$")


def stop_launched(admin: requests.Session, url: str, label: str, response: Any) -> None:
    """If ``label`` ("METHOD /path") launched a task (``response`` its 2xx answer), kill it and
    wait until it has settled."""
    match = LAUNCH.match(label)
    if not match:
        return
    try:
        body = response.json()
    except ValueError:
        return
    kind = match.group(1)
    task = body.get(kind.rstrip("s")) if isinstance(body, dict) else None
    if not task:
        return
    r = admin.post(f"{url}/api/v1/{kind}/{task['id']}/kill", timeout=30)
    assert r.status_code == 200, f"kill of {kind} {task['id']}: {r.status_code} {r.text[:300]}"

    def settled() -> bool:
        # Ended: the tests' simulated agents end a task they hold once it is killed, and that
        # end (the allocation's TERMINATED and its event) is written after the kill answers.
        # Until then the database still moves on the task's behalf.
        t = admin.get(f"{url}/api/v1/tasks/{task['id']}", timeout=30).json()["task"]
        return all(a["state"] == "STATE_TERMINATED" for a in t["allocations"])

    deadline = time.monotonic() + 60
    while not settled():
        assert time.monotonic() < deadline, (
            f"{kind} {task['id']} did not settle after its kill: "
            + admin.get(f"{url}/api/v1/tasks/{task['id']}", timeout=30).text[:500]
        )
        time.sleep(0.2)
