"""A user flooding the master (200 concurrent long-polls and 200 concurrent list loops) while a
real agent runs a trial in Docker: the agent is never declared lost, the trial runs once to
COMPLETED, and the flood gets quick 429s instead of the agents' capacity.

The flood lasts ``FLOOD_SECONDS``, longer than the cluster's ``agent_timeout_seconds`` (20 s),
all of it while the trial runs: the trial is paced (its ``batch_seconds``) so that its batches
take longer than the flood, sleeping rather than training as fast as a core allows.

(/info latency during such a flood is measured by bench/user_flood.py, not asserted here.)"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
import requests

from tests.e2e.cluster import EXAMPLES, Cluster, unique, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]

CORE = EXAMPLES / "core_api"
#: The cluster's agent timeout (tests/e2e/cluster.py) and a margin: a lost agent would be seen.
FLOOD_SECONDS = 25.0
#: The trial's pace and length: 1,000 batches of at least 50 ms, 50 s at least, outlast the
#: flood with 25 s to spare (its threads are started first, a few seconds on a busy machine).
BATCH_SECONDS = 0.05
BATCHES = 1000


def test_a_users_flood_never_makes_the_agent_look_lost(shared_one_slot: Cluster) -> None:
    cluster = shared_one_slot
    m = cluster.master
    with psycopg.connect(cluster.db_url) as conn:
        started = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    eid = cluster.create(
        CORE / "single.yaml",
        CORE,
        {
            "searcher": {"max_length": {"batches": BATCHES}},
            "hyperparameters": {"batch_seconds": BATCH_SECONDS},
        },
    )
    trial = wait_for(lambda: (cluster.trials(eid) or [None])[0], 60, "the trial")
    with psycopg.connect(cluster.db_url) as conn:

        def allocation() -> str | None:
            row = conn.execute(
                "SELECT id FROM allocations WHERE trial_id = %s AND state = 'RUNNING'",
                (trial["id"],),
            ).fetchone()
            conn.commit()
            return str(row[0]) if row else None

        alloc = wait_for(allocation, 120, "the trial's allocation running")
    # The flood is another admin's (admins may long-poll any allocation): the test's own polling
    # must not be held back by the flooder's per-user limits.
    flooder = unique("flooder")
    m.post(
        "/api/v1/users",
        {"user": {"username": flooder, "admin": True}, "password": "Flooder-pw-1"},
    )
    token = m.login(flooder, "Flooder-pw-1")
    stop = threading.Event()
    counts: dict[int, int] = {}
    lock = threading.Lock()

    def note(status: int) -> None:
        with lock:
            counts[status] = counts.get(status, 0) + 1

    # Every thread starts, then all flood at once: started one by one while the first ones
    # flooded, 400 threads took about 25 s to start on a loaded machine.
    go = threading.Event()

    def flood(path: str, params: dict[str, Any]) -> None:
        s = requests.Session()
        s.headers["Authorization"] = f"Bearer {token}"
        go.wait()
        while not stop.is_set():
            try:
                r = s.get(m.url + path, params=params, timeout=60)
                note(r.status_code)
                if r.status_code == 429:
                    stop.wait(float(r.headers.get("Retry-After", "1")))
            except requests.RequestException:
                note(0)

    threads = [
        threading.Thread(
            target=flood,
            args=(f"/api/v1/allocations/{alloc}/signals/preemption", {"timeout_seconds": 30}),
        )
        for _ in range(200)
    ] + [
        threading.Thread(target=flood, args=("/api/v1/experiments", {"limit": 100}))
        for _ in range(200)
    ]
    for t in threads:
        t.start()
    try:
        go.set()
        stop.wait(FLOOD_SECONDS)
        # The trial's allocation ran through the whole flood (its paced batches outlast it):
        # read as the flood ends, before its threads' last requests (a long-poll holds up to
        # 30 s) are waited for.
        with psycopg.connect(cluster.db_url) as conn:
            after = conn.execute("SELECT state FROM allocations WHERE id = %s", (alloc,)).fetchone()
    finally:
        stop.set()
        go.set()
        for t in threads:
            t.join(90)
    assert after is not None and after[0] == "RUNNING", after
    cluster.wait_state(eid, "STATE_COMPLETED", 600)
    with psycopg.connect(cluster.db_url) as conn:
        runs = conn.execute(
            "SELECT count(*) FROM allocations WHERE trial_id = %s", (trial["id"],)
        ).fetchone()
        # Since the test started (the cluster is shared: earlier tests ran on it).
        lost = conn.execute(
            "SELECT count(*) FROM events WHERE entity = 'agent' AND kind = 'lost'"
            " AND created_at >= %s",
            (started,),
        ).fetchone()
    assert runs is not None and runs[0] == 1, "the trial ran more than once: an agent was lost"
    assert lost is not None and lost[0] == 0
    assert counts.get(429, 0) > 0, counts  # the flood was held back...
    assert counts.get(200, 0) > 0, counts  # ...not shut out
    assert not any(code >= 500 or code == 0 or code == 403 for code in counts), counts
