"""Waiting requests park (det.master.dispatch.parked): more trials' preemption long-polls than
the master has API threads leave heartbeats, reports and ``/info`` answered while they wait
(bench/scale.py found 100 agents x 200 trials lost every agent: 128 threads, 200 long-polls).
The master is det-master's HTTP front (its channels, event loop and API threads, no user API
processes) served on a real port by a thread of the test's process, with its control loop
(``threaded_master_factory``, tests/integration/threaded.py): no master process is needed."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import psutil
import pytest
import requests

from tests.fakes.sim_agent import Holder, SimAgent, wait
from tests.integration.threaded import ThreadedMaster

pytestmark = pytest.mark.integration

TRIALS = 6
THREADS = 3

CONFIG = f"""
name: parked
entrypoint: x
searcher: {{name: random, metric: loss, max_trials: {TRIALS}, max_concurrent_trials: {TRIALS}}}
hyperparameters: {{lr: {{type: double, minval: 0.1, maxval: 1}}}}
"""


def test_long_polls_beyond_the_thread_count_leave_heartbeats_and_reports_answered(
    threaded_master_factory: Any,
) -> None:
    m: ThreadedMaster = threaded_master_factory(
        extra={"api_threads": THREADS, "user_api_processes": 0}
    )
    hold = Holder()
    agent = SimAgent(m.url, m.agent_token, "sim-0", slots=TRIALS, train=hold).start()
    try:
        m.post("/api/v1/experiments", {"config": CONFIG, "activate": True})
        wait(lambda: len(hold.specs) == TRIALS, 60, "six tasks")
        answers: list[int] = []
        started = threading.Barrier(TRIALS + 1)

        def poll(env: dict[str, str]) -> None:
            started.wait()
            r = requests.get(
                f"{m.url}/api/v1/allocations/{env['DET_ALLOCATION_ID']}/signals/preemption",
                params={"timeout_seconds": 25},
                headers={"Grpc-Metadata-x-allocation-token": f"Bearer {env['DET_SESSION_TOKEN']}"},
                timeout=60,
            )
            answers.append(r.status_code)

        pollers = [threading.Thread(target=poll, args=(s["env"],)) for s in hold.specs]
        for t in pollers:
            t.start()
        started.wait()
        # Every long-poll is in (a connection each, beside the agent's): twice the threads. The
        # master's end of each: this process's connections on the master's port.
        port = int(m.url.rsplit(":", 1)[1])

        def accepted() -> int:
            conns = psutil.Process().net_connections()
            return len([c for c in conns if c.status == "ESTABLISHED" and c.laddr.port == port])

        wait(
            lambda: accepted() > TRIALS,
            10,
            "the long-polls' connections",
        )
        env = hold.specs[0]["env"]
        task = requests.Session()
        task.headers["Grpc-Metadata-x-allocation-token"] = f"Bearer {env['DET_SESSION_TOKEN']}"
        beat = requests.Session()
        beat.headers["Authorization"] = f"Bearer {m.agent_token}"
        for step in range(1, 4):
            assert requests.get(f"{m.url}/info", timeout=10).status_code == 200
            r = beat.post(
                f"{m.url}/api/v1/agents/sim-1/heartbeat",
                json={"resourcePool": "default", "version": "t", "slots": [], "containers": []},
                timeout=10,
            )
            assert r.status_code == 200, r.text
            r = task.post(
                f"{m.url}/api/v1/trials/{env['DET_TRIAL_ID']}/metrics",
                json={
                    "group": "training",
                    "metrics": {
                        "trialId": int(env["DET_TRIAL_ID"]),
                        "trialRunId": int(env["DET_TRIAL_RUN_ID"]),
                        "stepsCompleted": step,
                        "metrics": {"avgMetrics": {"loss": 1.0 / step}},
                    },
                },
                timeout=10,
            )
            assert r.status_code == 200, r.text
        assert all(t.is_alive() for t in pollers), "the long-polls should still be waiting"
        for t in pollers:
            t.join(60)
        assert answers == [200] * TRIALS
    finally:
        hold.release.set()
        agent.stop()


def _register(m: ThreadedMaster, agent_ids: list[str]) -> None:
    """The agents, registered by a first heartbeat each (no slots)."""
    beat = requests.Session()
    beat.headers["Authorization"] = f"Bearer {m.agent_token}"
    for agent_id in agent_ids:
        r = beat.post(
            f"{m.url}/api/v1/agents/{agent_id}/heartbeat",
            json={"resourcePool": "default", "version": "t", "slots": [], "containers": []},
            timeout=10,
        )
        assert r.status_code == 200, r.text


def _ask_changes(m: ThreadedMaster, agent_id: str, seconds: float) -> tuple[Any, float]:
    """The agent's ``changes`` wait: its answer (the JSON, or the text of an error) and how
    long it was held."""
    t0 = time.monotonic()
    r = requests.get(
        f"{m.url}/api/v1/agents/{agent_id}/changes",
        params={"timeoutSeconds": seconds},
        headers={"Authorization": f"Bearer {m.agent_token}"},
        timeout=30,
    )
    return (r.json() if r.status_code == 200 else r.text), time.monotonic() - t0


def test_agents_waits_beyond_a_share_of_the_threads_are_held_while_they_park(
    threaded_master_factory: Any,
) -> None:
    """An agent's ``changes`` wait parks as a long-poll does; the share of the pool's threads
    (a quarter: 1 of 4 here) bounds only waits that could not park. Before, every wait past
    that share was answered at once, and those agents heartbeat at every pass instead of
    holding their wait and staying quiet (bench/scale.py: 300 agents, 32 held)."""
    m: ThreadedMaster = threaded_master_factory(extra={"api_threads": 4, "user_api_processes": 0})
    _register(m, [f"wait-{i}" for i in range(5)])
    held: list[float] = []
    lock = threading.Lock()

    def ask(i: int) -> None:
        answer, seconds = _ask_changes(m, f"wait-{i}", 3)
        assert answer == {"changed": False}, answer
        with lock:
            held.append(seconds)

    waits = [threading.Thread(target=ask, args=(i,)) for i in range(5)]
    for t in waits:
        t.start()
    for t in waits:
        t.join(60)
    assert len(held) == 5 and min(held) >= 2.5, held


@pytest.mark.parametrize("park", [False, True], ids=["in-a-thread", "without-a-thread"])
def test_a_poll_the_cap_cuts_ends_at_its_allocations_phase_not_at_the_cap(
    threaded_master_factory: Any, monkeypatch: pytest.MonkeyPatch, park: bool
) -> None:
    """Trials started together would otherwise ask again together at every cap, in bursts
    (det.master.preemptwait.spread_wait). With a cap of 8 s here (60 s in a master), a poll
    asked for 60 s ends between 4 and 12 s at its allocation's phase: one sent when that phase
    comes round early in the window ends well before the cap. The same for a poll that waits
    without a thread (``api_park_without_thread``: served again at its first run's deadline)."""
    from det.master.api import tasks
    from det.master.preemptwait import spread_wait

    cap = 8.0
    monkeypatch.setattr(tasks, "MAX_LONG_POLL_SECONDS", cap)
    m: ThreadedMaster = threaded_master_factory(
        extra={"user_api_processes": 0, "api_park_without_thread": park}
    )
    hold = Holder()
    agent = SimAgent(m.url, m.agent_token, "sim-0", slots=1, train=hold).start()
    try:
        m.post("/api/v1/experiments", {"config": CONFIG, "activate": True})
        wait(lambda: len(hold.specs) == 1, 60, "a task")
        env = hold.specs[0]["env"]
        alloc = env["DET_ALLOCATION_ID"]
        # Sent when the allocation's phase would end it within 0.4 s of the window's start.
        wait(lambda: spread_wait(alloc, 60.0, cap, time.time()) < 4.4, 10, "the phase")
        t0 = time.monotonic()
        r = requests.get(
            f"{m.url}/api/v1/allocations/{alloc}/signals/preemption",
            params={"timeout_seconds": 60},
            headers={"Grpc-Metadata-x-allocation-token": f"Bearer {env['DET_SESSION_TOKEN']}"},
            timeout=60,
        )
        held = time.monotonic() - t0
        assert r.status_code == 200 and r.json() == {"preempt": False}, r.text
        assert 4.0 <= held < cap - 1.0, held  # held to its phase, not cut at the cap (8 s)
    finally:
        hold.release.set()
        agent.stop()


def test_waits_in_a_front_hold_no_thread_and_a_word_answers_theirs_at_once(
    threaded_master_factory: Any,
) -> None:
    """In a front a waiting request holds no thread (det.master.deferred): five agents' waits
    leave the pool at its own four threads (each grew it by one before), the word for one agent
    (``NOTIFY det_agent``) answers its wait at once, and the others end at their deadline."""
    import psycopg

    from det.master import deferred, dispatch

    m: ThreadedMaster = threaded_master_factory(
        extra={"api_threads": 4, "user_api_processes": 0, "api_park_without_thread": True}
    )
    _register(m, [f"quiet-{i}" for i in range(5)])
    answers: dict[int, tuple[Any, float]] = {}

    def ask(i: int) -> None:
        answers[i] = _ask_changes(m, f"quiet-{i}", 6)

    before = deferred.parked()
    waits = [threading.Thread(target=ask, args=(i,)) for i in range(5)]
    t0 = time.monotonic()
    for t in waits:
        t.start()
    wait(lambda: deferred.parked() == before + 5, 10, "five parked waits")
    pool = dispatch._current
    assert pool is not None and len(pool.threads) == 4, pool and pool.threads
    with psycopg.connect(m.db_url, autocommit=True) as conn:
        conn.execute("NOTIFY det_agent, 'quiet-0'")
    waits[0].join(5)
    assert answers[0][0] == {"changed": True}, answers
    assert time.monotonic() - t0 < 5, answers  # before the deadline (6 s)
    for t in waits[1:]:
        t.join(30)
    assert [answers[i][0] for i in range(1, 5)] == [{"changed": False}] * 4, answers
    assert min(answers[i][1] for i in range(1, 5)) >= 5.5, answers
    assert deferred.parked() == before


def _changes_request(agent_id: str, token: str, seconds: float) -> bytes:
    return (
        f"GET /api/v1/agents/{agent_id}/changes?timeoutSeconds={seconds} HTTP/1.1\r\n"
        f"Host: master\r\nAuthorization: Bearer {token}\r\n\r\n"
    ).encode()


def _answers(sock: Any, count: int, seconds: float) -> list[bytes]:
    """The bodies of the first ``count`` answers on ``sock`` (small JSON, Content-Length)."""
    data, bodies = b"", []
    deadline = time.monotonic() + seconds
    while len(bodies) < count and time.monotonic() < deadline:
        part = sock.recv(65536)
        assert part, data
        data += part
        while b"\r\n\r\n" in data:
            head, rest = data.split(b"\r\n\r\n", 1)
            length = int(
                next(
                    line.split(b":", 1)[1]
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
            )
            if len(rest) < length:
                break
            bodies.append(rest[:length])
            data = rest[length:]
    return bodies


def test_a_parked_wait_is_answered_before_what_its_connection_sends_after_it(
    threaded_master_factory: Any,
) -> None:
    """A request sent on a parked request's connection waits for that answer (HTTP/1.1
    answers in order); a client that leaves while parked leaves nothing parked behind."""
    import socket

    from det.master import deferred

    m: ThreadedMaster = threaded_master_factory(
        extra={"user_api_processes": 0, "api_park_without_thread": True}
    )
    _register(m, ["order-0"])
    host, port = m.url.rsplit("//", 1)[1].split(":")
    before = deferred.parked()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(_changes_request("order-0", m.agent_token, 2))
        wait(lambda: deferred.parked() == before + 1, 10, "the parked wait")
        sock.sendall(b"GET /info HTTP/1.1\r\nHost: master\r\n\r\n")
        first, second = _answers(sock, 2, 20)
        assert json.loads(first) == {"changed": False}, first
        assert "version" in json.loads(second), second
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(_changes_request("order-0", m.agent_token, 2))
        wait(lambda: deferred.parked() == before + 1, 10, "the parked wait")
    # Gone at its deadline, its connection closed; the front serves on.
    wait(lambda: deferred.parked() == before, 10, "the wait of the client that left")
    assert requests.get(f"{m.url}/info", timeout=10).status_code == 200
