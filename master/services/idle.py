"""Idle notebooks and TensorBoards: one is killed once it has been idle for its ``idle_timeout``,
or without one the master's ``tensorboard_timeout`` (300 s unless configured) or
``notebook_timeout`` (none unless configured); a TensorBoard is idle by ``activity`` (no request
through the proxy), a notebook by Determined's ``notebook_idle_type``:

* ``activity``: no request reached it through the proxy;
* ``kernels_or_terminals`` (the default): no kernel busy and no Jupyter activity (Jupyter's
  own ``last_activity``: kernel messages, API requests);
* ``kernel_connections``: as above, and no client connected to a kernel.

Jupyter is asked over the same path the proxy uses (the agent's address, the service token),
outside any transaction; an unanswered status counts as activity (a notebook is never killed
because the master could not reach it).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
import urllib.request
from dataclasses import dataclass

from psycopg.rows import class_row

from det.common.jsontypes import JSONObject, JSONValue
from det.master.handles import MasterState
from det.master.services import ntsc, task_services, tasks

logger = logging.getLogger(__name__)

#: How often the pass asks Jupyter (every tick would be a request per notebook per tick).
EVERY_SECONDS = 5.0
_last_run = 0.0
# Straight to the agent: never through an HTTP proxy of the environment's.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True, slots=True)
class Served:
    """A live notebook or TensorBoard whose service is up (its ``ntsc_tasks`` columns)."""

    id: str
    kind: str
    config: JSONObject
    last_activity: dt.datetime
    proxy_address: str


def _jupyter(st: MasterState, task: Served, path: str) -> JSONValue:
    url = f"http://{task.proxy_address}/proxy/{task.id}/api/{path}"
    req = urllib.request.Request(
        url, headers={"Authorization": f"token {task_services.service_token(st, task.id)}"}
    )
    with _OPENER.open(req, timeout=2.0) as resp:
        answer: JSONValue = json.loads(resp.read())
        return answer


def idle_since(st: MasterState, task: Served, now: dt.datetime) -> dt.datetime:
    """Since when ``task`` has been idle; ``now`` when busy."""
    kind = ntsc.config_of(task.config).notebook_idle_type
    if kind == "activity" or task.kind == "TENSORBOARD":
        return task.last_activity
    try:
        status = _jupyter(st, task, "status")  # Jupyter does not count it as activity
        kernels = _jupyter(st, task, "kernels?no_track_activity=1")
    except (OSError, ValueError) as e:
        logger.debug("notebook %s: no status (%s); counted as active", task.id, e)
        return now
    if not isinstance(status, dict) or not isinstance(kernels, list):
        logger.debug("notebook %s: an answer of another shape; counted as active", task.id)
        return now
    running = [k for k in kernels if isinstance(k, dict)]
    if any(k.get("execution_state") == "busy" for k in running):
        return now
    if kind == "kernel_connections" and any(k.get("connections") for k in running):
        return now
    last = dt.datetime.fromisoformat(str(status["last_activity"]).replace("Z", "+00:00"))
    return max(last, task.last_activity)


def idle_pass(st: MasterState) -> None:
    global _last_run
    if time.monotonic() - _last_run < EVERY_SECONDS:
        return
    _last_run = time.monotonic()
    with st.pool.connection() as conn:
        rows = (
            conn.cursor(row_factory=class_row(Served))
            .execute(
                "SELECT id, kind, config, last_activity, proxy_address FROM ntsc_tasks"
                " WHERE kind IN ('NOTEBOOK', 'TENSORBOARD') AND state = 'ACTIVE'"
                " AND proxy_address IS NOT NULL"
            )
            .fetchall()
        )
        now = conn.execute("SELECT now() AS t").fetchone()["t"]  # type: ignore[index]
    defaults = {
        "TENSORBOARD": st.config.tensorboard_timeout,
        "NOTEBOOK": st.config.notebook_timeout,
    }
    for task in rows:
        own = ntsc.config_of(task.config).idle_timeout
        timeout = float(own) if own is not None else float(defaults[task.kind] or 0)
        if timeout <= 0:
            continue
        source = "idle_timeout" if own is not None else f"{task.kind.lower()}_timeout"
        since = idle_since(st, task, now)
        if (now - since).total_seconds() < timeout:
            continue
        with st.pool.connection() as conn:
            logger.info("%s %s idle since %s: killing it", task.kind.lower(), task.id, since)
            tasks.kill(conn, task.id, f"killed: idle for more than {timeout:g} s ({source})")
