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
from typing import Any

from det.master.expconf import stored
from det.master.handles import MasterState
from det.master.services import task_services, tasks

logger = logging.getLogger(__name__)

#: How often the pass asks Jupyter (every tick would be a request per notebook per tick).
EVERY_SECONDS = 5.0
_last_run = 0.0
# Straight to the agent: never through an HTTP proxy of the environment's.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _jupyter(st: MasterState, task: dict[str, Any], path: str) -> Any:
    url = f"http://{task['proxy_address']}/proxy/{task['id']}/api/{path}"
    req = urllib.request.Request(
        url, headers={"Authorization": f"token {task_services.service_token(st, task['id'])}"}
    )
    with _OPENER.open(req, timeout=2.0) as resp:
        return json.loads(resp.read())


def idle_since(st: MasterState, task: dict[str, Any], now: dt.datetime) -> dt.datetime:
    """Since when ``task`` (a row of ``ntsc_tasks``) has been idle; ``now`` when busy."""
    kind = stored.notebook_idle_type(task["config"])
    if kind == "activity" or task.get("kind") == "TENSORBOARD":
        return task["last_activity"]  # type: ignore[no-any-return]
    try:
        status = _jupyter(st, task, "status")  # Jupyter does not count it as activity
        kernels = _jupyter(st, task, "kernels?no_track_activity=1")
    except (OSError, ValueError) as e:
        logger.debug("notebook %s: no status (%s); counted as active", task["id"], e)
        return now
    if any(k.get("execution_state") == "busy" for k in kernels):
        return now
    if kind == "kernel_connections" and any(k.get("connections") for k in kernels):
        return now
    last = dt.datetime.fromisoformat(str(status["last_activity"]).replace("Z", "+00:00"))
    proxied: dt.datetime = task["last_activity"]
    return max(last, proxied)


def idle_pass(st: MasterState) -> None:
    global _last_run
    if time.monotonic() - _last_run < EVERY_SECONDS:
        return
    _last_run = time.monotonic()
    with st.pool.connection() as conn:
        rows = conn.execute(
            "SELECT id, kind, config, last_activity, proxy_address FROM ntsc_tasks"
            " WHERE kind IN ('NOTEBOOK', 'TENSORBOARD') AND state = 'ACTIVE'"
            " AND proxy_address IS NOT NULL"
        ).fetchall()
        now = conn.execute("SELECT now() AS t").fetchone()["t"]  # type: ignore[index]
    defaults = {
        "TENSORBOARD": st.config.tensorboard_timeout,
        "NOTEBOOK": st.config.notebook_timeout,
    }
    for task in rows:
        own = task["config"].get("idle_timeout")
        timeout = float(own) if own is not None else float(defaults[task["kind"]] or 0)
        if timeout <= 0:
            continue
        source = "idle_timeout" if own is not None else f"{task['kind'].lower()}_timeout"
        since = idle_since(st, task, now)
        if (now - since).total_seconds() < timeout:
            continue
        with st.pool.connection() as conn:
            logger.info("%s %s idle since %s: killing it", task["kind"].lower(), task["id"], since)
            tasks.kill(conn, task["id"], f"killed: idle for more than {timeout:g} s ({source})")
