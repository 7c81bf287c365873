"""Reading a task's logs marks its live allocations watched (migration 0049): the agent is woken
as for new work, and its heartbeat answers say ``logsWatched`` for them, so it ships their lines
at once instead of in batches seconds apart (det.agent.logs.LogShipper). The master's app and
control loop run in the test's process (``loop_master``)."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from det.agent.master_client import MasterClient
from det.master import preemptwait
from tests.fakes.sim_agent import SimAgent, wait
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration

CONFIG = """
name: watched
entrypoint: x
searcher: {name: single, metric: loss, max_length: 1}
"""


def test_reading_logs_wakes_the_agent_and_marks_the_allocation_watched(
    loop_master: InProcessMaster,
) -> None:
    m = loop_master
    release = threading.Event()

    def hold(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        release.wait(60)
        return 0

    agent = SimAgent(m.url, m.agent_token, "sim-logs", slots=1, train=hold).start()
    client = MasterClient(m.url, m.agent_token, timeout=30)
    try:
        eid = m.post("/api/v1/experiments", {"config": CONFIG, "activate": True})["experiment"][
            "id"
        ]
        trial = wait(
            lambda: (m.get(f"/api/v1/experiments/{eid}/trials")["trials"] or [None])[0],
            60,
            "the trial",
        )
        alloc = wait(lambda: next(iter(agent.tasks), None), 60, "the trial's container")
        with psycopg.connect(m.db_url, autocommit=True) as conn:
            wait(
                lambda: conn.execute(
                    "SELECT 1 FROM allocations WHERE id = %s AND state = 'RUNNING'", (alloc,)
                ).fetchone(),
                60,
                "the allocation running",
            )
        assert agent.logs_watched == frozenset()  # no one reads its logs yet

        woken: list[bool] = []
        waiting = threading.Thread(
            target=lambda: woken.append(client.wait_for_work("sim-logs", 20)), daemon=True
        )
        waiting.start()
        wait(lambda: _waiting(m, "sim-logs"), 10, "the agent's wait registered")
        r = m.session().get(f"{m.url}/api/v1/trials/{trial['id']}/logs", timeout=30)
        assert r.status_code == 200, r.text
        waiting.join(30)
        assert woken == [True]  # the watch's notification, not a timeout
        wait(lambda: agent.logs_watched == {alloc}, 10, "the heartbeat answer's logsWatched")

        # Read again within the watch: written once, so no one is woken a second time.
        woken.clear()
        again = threading.Thread(
            target=lambda: woken.append(client.wait_for_work("sim-logs", 2)), daemon=True
        )
        again.start()
        wait(lambda: _waiting(m, "sim-logs"), 10, "the agent's second wait registered")
        assert m.session().get(f"{m.url}/api/v1/trials/{trial['id']}/logs", timeout=30).ok
        again.join(30)
        assert woken == [False]
        assert agent.logs_watched == {alloc}
    finally:
        release.set()
        agent.stop()


def _waiting(m: InProcessMaster, agent_id: str) -> bool:
    """``agent_id``'s wait is registered with this process's listener, which listens."""
    w = preemptwait.waiters(str(m.state.pool.conninfo), preemptwait.AGENT_CHANNEL)
    return w.listening and agent_id in w._waiting
