"""Waiting requests (preemption long-polls) hold no database connection: with more of them
than the pool has connections, every other call is still answered while they wait. Users'
requests are served by processes of their own: however busy those are, agents, tasks and
``/info`` are answered, over HTTP and HTTPS."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import psutil
import pytest
import requests

from det.common import tls
from tests.fakes.sim_agent import Holder, SimAgent, wait
from tests.integration.conftest import ADMIN_PASSWORD, Master, MasterClient
from tests.integration.test_master_tls import Cert, local_cert, tls_master_factory

__all__ = ["local_cert", "tls_master_factory"]

pytestmark = pytest.mark.integration

CONFIG = """
name: polls
entrypoint: x
searcher: {name: random, metric: loss, max_trials: 6, max_concurrent_trials: 6}
hyperparameters: {lr: {type: double, minval: 0.1, maxval: 1}}
"""


def test_long_polls_beyond_the_pool_size_do_not_starve_the_api(master_factory: Any) -> None:
    m: Master = master_factory(extra={"db_pool_size": 3, "api_threads": 32})
    hold = Holder()  # its tasks run until the test ends, however long that takes
    specs, release = hold.specs, hold.release

    agent = SimAgent(m.url, m.agent_token, "sim-0", slots=6, train=hold).start()
    try:
        m.post("/api/v1/experiments", {"config": CONFIG, "activate": True})
        wait(lambda: len(specs) == 6, 60, "six tasks")
        answers: list[int] = []

        def poll(env: dict[str, str]) -> None:
            r = requests.get(
                f"{m.url}/api/v1/allocations/{env['DET_ALLOCATION_ID']}/signals/preemption",
                params={"timeout_seconds": 20},
                headers={"Grpc-Metadata-x-allocation-token": f"Bearer {env['DET_SESSION_TOKEN']}"},
                timeout=60,
            )
            answers.append(r.status_code)

        pollers = [threading.Thread(target=poll, args=(s["env"],)) for s in specs]
        for t in pollers:
            t.start()
        # Six long-polls wait on a pool of three connections; other calls still get answers.
        for _ in range(5):
            assert m.session().get(m.url + "/api/v1/me", timeout=10).status_code == 200
            assert m.session().get(m.url + "/api/v1/job-queues", timeout=10).status_code == 200
        assert all(t.is_alive() for t in pollers), "the long-polls should still be waiting"
        for t in pollers:
            t.join(60)
        assert answers == [200] * 6
    finally:
        release.set()
        agent.stop()


@pytest.mark.parametrize("bad", ["nan", "NaN", "inf", "-inf", "-1", "x", "1e400"])
def test_preemption_poll_refuses_a_timeout_that_is_not_a_finite_non_negative_number(
    api_master: MasterClient, bad: str
) -> None:
    # The allocation need not exist: the parameter is checked before anything is read (and
    # nothing waits: the master's app in the test's process answers the refusal).
    r = api_master.session().get(
        f"{api_master.url}/api/v1/allocations/a-1/signals/preemption",
        params={"timeout_seconds": bad},
        timeout=10,
    )
    assert r.status_code == 400, r.text
    assert "timeout_seconds" in r.json()["message"]


def test_a_users_flood_of_long_polls_is_capped_and_agents_are_still_served(
    master_factory: Any,
) -> None:
    # api_threads 16: a user may hold 1 waiting request (in each user process: one here);
    # heartbeats are never counted.
    m: Master = master_factory(extra={"api_threads": 16, "user_api_processes": 1})
    hold = Holder()  # its tasks run until the test ends, however long that takes
    specs, release = hold.specs, hold.release

    agent = SimAgent(m.url, m.agent_token, "sim-0", slots=1, train=hold).start()
    try:
        eid = m.post("/api/v1/experiments", {"config": CONFIG, "activate": True})["experiment"][
            "id"
        ]
        wait(lambda: len(specs) == 1, 60, "a task")
        alloc = specs[0]["env"]["DET_ALLOCATION_ID"]
        url = f"{m.url}/api/v1/allocations/{alloc}/signals/preemption"
        user = m.session()
        statuses: list[int] = []

        def poll() -> None:
            # Held until the pause below, however late a loaded machine starts the other five
            # (with a 5 s hold, a poll that came after it ended was answered too).
            statuses.append(user.get(url, params={"timeout_seconds": 120}, timeout=180).status_code)

        pollers = [threading.Thread(target=poll) for _ in range(6)]
        for t in pollers:
            t.start()
        wait(lambda: len(statuses) == 5, 60, "five polls answered")
        assert statuses == [429] * 5, statuses
        # While the user's poll is held and the others refused, heartbeats and /info are
        # answered (a request queued behind the held poll would wait for its 120 s).
        for _ in range(5):
            assert requests.get(m.url + "/info", timeout=30).status_code == 200
            beat = requests.post(
                f"{m.url}/api/v1/agents/probe/heartbeat",
                json={"resourcePool": "default", "version": "probe", "slots": [], "containers": []},
                headers={"Authorization": f"Bearer {m.agent_token}"},
                timeout=30,
            )
            assert beat.status_code == 200, beat.text
        assert len(statuses) == 5, statuses  # still held
        m.post(f"/api/v1/experiments/{eid}/pause")  # the preemption ends the held poll
        for t in pollers:
            t.join(120)
        assert sorted(statuses) == [200] + [429] * 5, statuses
        again = user.get(url, params={"timeout_seconds": 1}, timeout=30)
        assert again.status_code == 200  # the held poll ended: its slot is free again
    finally:
        release.set()
        agent.stop()


def _frozen_user_processes_hold_up_no_cluster_traffic(
    m: Master, session: Callable[[], requests.Session]
) -> None:
    """With the user processes stopped (SIGSTOP: an infinitely slow flood), a user's request
    gets no answer, while /info, an agent's heartbeat and a task's call are answered; once they
    run again, the user's request is answered, and more on the same connection."""
    children = psutil.Process(m.proc.pid).children()
    assert len(children) == 2, children  # api_processes 1, user_api_processes 2 (the default)
    assert all(c.nice() > os.nice(0) for c in children)  # they yield the CPU to the front
    hold = Holder()  # its tasks run until the test ends, however long that takes
    specs, release = hold.specs, hold.release

    user = session()
    login = user.post(
        m.url + "/api/v1/auth/login",
        json={"username": "admin", "password": ADMIN_PASSWORD},
        timeout=10,
    )
    user.headers["Authorization"] = f"Bearer {login.json()['token']}"
    assert user.post(
        m.url + "/api/v1/experiments", json={"config": CONFIG, "activate": True}, timeout=10
    ).ok
    agent = SimAgent(m.url, m.agent_token, "sim-0", slots=1, train=hold)
    agent._session = session()  # on HTTPS: the fake agent trusts the master's certificate
    agent._session.headers["Authorization"] = f"Bearer {m.agent_token}"
    agent.start()
    try:
        wait(lambda: len(specs) == 1, 60, "a task")
        env = specs[0]["env"]
        for child in children:
            child.send_signal(signal.SIGSTOP)
        try:
            fresh = session()
            fresh.headers["Authorization"] = user.headers["Authorization"]
            with pytest.raises(requests.exceptions.ReadTimeout):
                fresh.get(m.url + "/api/v1/me", timeout=3)
            for _ in range(3):
                assert session().get(m.url + "/info", timeout=5).status_code == 200
                beat = session().post(
                    f"{m.url}/api/v1/agents/probe/heartbeat",
                    json={"resourcePool": "default", "version": "p", "slots": [], "containers": []},
                    headers={"Authorization": f"Bearer {m.agent_token}"},
                    timeout=5,
                )
                assert beat.status_code == 200, beat.text
                task = session().get(
                    f"{m.url}/api/v1/allocations/{env['DET_ALLOCATION_ID']}/signals/preemption",
                    params={"timeout_seconds": 0},
                    headers={
                        "Grpc-Metadata-x-allocation-token": f"Bearer {env['DET_SESSION_TOKEN']}"
                    },
                    timeout=5,
                )
                assert task.status_code == 200, task.text
        finally:
            for child in children:
                child.send_signal(signal.SIGCONT)
        for _ in range(3):  # one connection, several requests (relayed on HTTPS)
            me = user.get(m.url + "/api/v1/me", timeout=10)
            assert me.status_code == 200 and me.json()["user"]["username"] == "admin", me.text
            listed = user.get(m.url + "/api/v1/experiments", params={"limit": 100}, timeout=10)
            assert listed.status_code == 200 and len(listed.json()["experiments"]) == 1
        # A large answer, and the user process closes the connection after it: all of it comes.
        big = session().get(
            m.url + "/api/v1/openapi.json",
            headers={"Connection": "close", "Authorization": user.headers["Authorization"]},
            timeout=30,
        )
        assert big.status_code == 200 and len(big.content) > 128 * 1024, len(big.content)
        assert len(big.content) == int(big.headers["Content-Length"])
        assert big.json()["openapi"].startswith("3.")
    finally:
        release.set()
        agent.stop()


def test_frozen_user_processes_hold_up_no_agent_task_or_info(master_factory: Any) -> None:
    m: Master = master_factory()
    _frozen_user_processes_hold_up_no_cluster_traffic(m, requests.Session)


def test_frozen_user_processes_hold_up_no_agent_task_or_info_over_https(
    tls_master_factory: Any, local_cert: Cert
) -> None:
    m: Master = tls_master_factory(local_cert)
    trust = tls.load(str(local_cert.cert), None)
    _frozen_user_processes_hold_up_no_cluster_traffic(m, lambda: tls.session(trust))


def test_fronts_that_hand_users_off_run_their_own_thread_count(master_factory: Any) -> None:
    # The fronts (the master's process and its second API process) serve agents, tasks and
    # /info: cluster_api_threads workers each; the user process keeps api_threads (its
    # admission limits derive from them). A process's other threads (loops, listeners) are a
    # dozen or two, far below 64.
    m: Master = master_factory(
        extra={
            "api_processes": 2,
            "user_api_processes": 1,
            "api_threads": 64,
            "cluster_api_threads": 3,
        }
    )
    master = psutil.Process(m.proc.pid)
    children = master.children()
    users = [p for p in children if p.nice() > master.nice()]
    fronts = [master] + [p for p in children if p not in users]
    assert len(users) == 1 and len(fronts) == 2, (users, fronts)
    # Idle workers wait for requests: every one is started with its process.
    wait(lambda: users[0].num_threads() >= 64, 60, "the user process's 64 workers")
    assert all(p.num_threads() < 64 for p in fronts), [p.num_threads() for p in fronts]
    # The fronts' few threads still answer agents and /info.
    assert requests.get(m.url + "/info", timeout=30).status_code == 200
