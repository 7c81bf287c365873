"""``DET_USER_TOKEN`` on the master's app in the test's process with its control loop
(``loop_master``; its log is every record this process logs, at DEBUG): every trial and interactive task gets a session of its
owner (the official SDK's ``client.login()`` and ``det`` use it), one per allocation however
many heartbeats rebuild the spec, never shown by the API or the master's log, and dead once
the allocation ends. A simulated agent holds the tasks."""

from __future__ import annotations

import hashlib
import logging
import threading
from typing import Any

import psycopg
import pytest
import requests

from tests.fakes.sim_agent import SimAgent, wait
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration

EXPERIMENT = "name: tok\nentrypoint: x\nsearcher: {name: single, metric: loss, max_length: 10}\n"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _sessions_of(db_url: str, allocation_id: str) -> list[tuple[str, bool]]:
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT token_hash, revoked_at IS NOT NULL FROM user_sessions WHERE allocation_id = %s",
            (allocation_id,),
        ).fetchall()
    return [(str(r[0]), bool(r[1])) for r in rows]


def test_tasks_get_their_owners_session_until_they_end(
    loop_master: InProcessMaster, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    m = loop_master
    caplog.set_level(logging.DEBUG)  # the master's log: more than a det-master's (INFO) writes
    for name in ("alice", "bob"):
        m.post("/api/v1/users", {"user": {"username": name}, "password": f"{name}-pw-123"})
    alice = m.session(m.login("alice", "alice-pw-123"))
    bob = m.session(m.login("bob", "bob-pw-123"))
    # Bob's experiment, never activated: something of his that Alice may not change.
    r = bob.post(m.url + "/api/v1/experiments", json={"config": EXPERIMENT}, timeout=30)
    assert r.status_code == 200, r.text
    bobs_experiment = int(r.json()["experiment"]["id"])

    specs: dict[str, dict[str, Any]] = {}  # DET_TASK_TYPE -> spec
    release = {"TRIAL": threading.Event(), "COMMAND": threading.Event()}

    def hold(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        kind = spec["env"]["DET_TASK_TYPE"]
        specs[kind] = spec
        while not release[kind].is_set() and not killed.is_set():
            release[kind].wait(0.2)
        return 0

    agent = SimAgent(m.url, m.agent_token, "sim-tok", slots=2, train=hold).start()
    try:
        r = alice.post(
            m.url + "/api/v1/experiments", json={"config": EXPERIMENT, "activate": True}, timeout=30
        )
        assert r.status_code == 200, r.text
        experiment_id = int(r.json()["experiment"]["id"])
        r = alice.post(
            m.url + "/api/v1/commands",
            json={"config": {"entrypoint": ["true"], "resources": {"slots": 0}}},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        command_id = r.json()["command"]["id"]
        wait(lambda: len(specs) == 2, 60, "the trial and the command running")

        tokens = {}
        for kind, spec in specs.items():
            env = spec["env"]
            token = env["DET_USER_TOKEN"]
            tokens[kind] = token
            assert env["DET_USER"] == "alice", kind
            assert token != env["DET_SESSION_TOKEN"], kind
            s = requests.Session()
            s.headers.update(_bearer(token))
            me = s.get(m.url + "/api/v1/me", timeout=10)
            assert me.status_code == 200 and me.json()["user"]["username"] == "alice", me.text
            assert s.get(m.url + "/api/v1/experiments", timeout=10).status_code == 200
            # The owner's rights, no more: Bob's experiment and tokens are not Alice's (she
            # may stop it, as every user may in an open workspace, but not delete it).
            r = s.delete(m.url + f"/api/v1/experiments/{bobs_experiment}", timeout=10)
            assert r.status_code == 403, (kind, r.text)
            r = s.get(m.url + "/api/v1/tokens", params={"username": "bob"}, timeout=10)
            assert r.status_code == 403, (kind, r.text)
        assert tokens["TRIAL"] != tokens["COMMAND"]

        # One session per allocation, however many heartbeats rebuilt the spec since.
        trial_alloc = specs["TRIAL"]["env"]["DET_ALLOCATION_ID"]
        command_alloc = specs["COMMAND"]["env"]["DET_ALLOCATION_ID"]
        threading.Event().wait(3)  # heartbeats every 0.1 s: dozens of specs built
        for kind, alloc in (("TRIAL", trial_alloc), ("COMMAND", command_alloc)):
            digest = hashlib.sha256(tokens[kind].encode()).hexdigest()
            assert _sessions_of(pg_url, alloc) == [(digest, False)], kind

        # Never in an answer nor in the master's log.
        trial_id = specs["TRIAL"]["env"]["DET_TRIAL_ID"]
        for path in (
            f"/api/v1/experiments/{experiment_id}",
            f"/api/v1/trials/{trial_id}",
            f"/api/v1/commands/{command_id}",
            f"/api/v1/tasks/{specs['TRIAL']['env']['DET_TASK_ID']}",
            "/api/v1/tasks",
            "/api/v1/tokens?showInactive=true",
        ):
            body = alice.get(m.url + path, timeout=10).text
            for token in tokens.values():
                assert token not in body, path

        # The trial ends (its container exits 0): its token dies with its allocation.
        release["TRIAL"].set()
        wait(
            lambda: (
                requests.get(
                    m.url + "/api/v1/me", headers=_bearer(tokens["TRIAL"]), timeout=10
                ).status_code
                == 401
            ),
            60,
            "the trial's token refused",
        )
        assert _sessions_of(pg_url, trial_alloc)[0][1], "revoked in the database"
        # Had the revocation been lost, the ended allocation would still refuse it.
        with psycopg.connect(pg_url) as conn:
            conn.execute(
                "UPDATE user_sessions SET revoked_at = NULL WHERE allocation_id = %s",
                (trial_alloc,),
            )
        me = requests.get(m.url + "/api/v1/me", headers=_bearer(tokens["TRIAL"]), timeout=10)
        assert me.status_code == 401

        # A logout inside the task is final: the next heartbeats' specs issue no new session.
        r = requests.post(
            m.url + "/api/v1/auth/logout", headers=_bearer(tokens["COMMAND"]), timeout=10
        )
        assert r.status_code == 200, r.text
        threading.Event().wait(2)
        me = requests.get(m.url + "/api/v1/me", headers=_bearer(tokens["COMMAND"]), timeout=10)
        assert me.status_code == 401
        assert [revoked for _, revoked in _sessions_of(pg_url, command_alloc)] == [True]
        assert alice.post(m.url + f"/api/v1/commands/{command_id}/kill", timeout=10).ok
        logs = caplog.text
        for token in tokens.values():
            assert token not in logs
    finally:
        for event in release.values():
            event.set()
        agent.stop()
