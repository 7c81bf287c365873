"""Who may call what, for every route of the master: unauthenticated callers, agents and task
(allocation) tokens reach only the routes marked for them. Per-resource rules between users and
tasks (owner, other user, admin, own task, other task) are in test_master_ownership.py. The
master's app and control loop run in the test's process (tests/integration/inproc.py); a
follow route's answer is asked for as a stream and closed unread, as over a socket.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from flask import Flask

from det.master.api import BLUEPRINTS
from tests.fakes.sim_agent import SimAgent, wait
from tests.integration.inproc import InProcessMaster, control_loop, in_process_master, routed

pytestmark = pytest.mark.integration

CONFIG = """
name: authz
entrypoint: x
searcher: {name: single, metric: loss, max_length: 10}
"""


def _routes() -> list[tuple[str, str, frozenset[str]]]:
    app = Flask("routes")
    for bp in BLUEPRINTS:
        app.register_blueprint(bp)
    out = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static" or not rule.rule.startswith(("/api/", "/info", "/health")):
            continue
        allowed = getattr(app.view_functions[rule.endpoint], "_det_allow", frozenset({"user"}))
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            out.append((method, rule.rule, frozenset(allowed)))
    return sorted(out, key=lambda r: (r[1], r[0]))


ROUTES = _routes()


def _path(rule: str) -> str:
    values = {
        "experiment_id": "1", "trial_id": "1", "allocation_id": "a-1", "agent_id": "a-1",
        "slot_id": "0", "user_id": "1", "name": "m", "uid": "00000000-0000-0000-0000-000000000000",
        "task_id": "t-1", "pool": "default", "checkpoint_uuid": "00000000-0000-0000-0000-000000000000",
    }  # fmt: skip
    path = rule
    for key, value in values.items():
        path = path.replace(f"<int:{key}>", value).replace(f"<{key}>", value)
    # Any other placeholder: a plain value.
    while "<" in path:
        start, end = path.index("<"), path.index(">")
        path = path[:start] + "1" + path[end + 1 :]
    return path


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory, pg_server: str) -> Iterator[dict[str, Any]]:
    import psycopg

    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute('DROP DATABASE IF EXISTS "det_authz" WITH (FORCE)')
        conn.execute('CREATE DATABASE "det_authz"')
    head, sep, query = pg_server.partition("?")
    db = f"{head.rpartition('/')[0]}/det_authz{sep}{query}"
    specs: list[dict[str, Any]] = []
    release = threading.Event()

    def hold(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        specs.append(spec)
        release.wait(600)
        return 0

    # The master's app and control loop in this process; the SimAgent's calls reach the app.
    with (
        in_process_master(tmp_path_factory.mktemp("authz"), db) as m,
        routed(m),
        control_loop(m),
    ):
        agent = SimAgent(m.url, m.agent_token, "sim-0", slots=1, train=hold).start()
        try:
            m.post("/api/v1/experiments", {"config": CONFIG, "activate": True})
            wait(lambda: len(specs) == 1, 60, "a running task")
            yield {"master": m, "task": specs[0]["env"]["DET_SESSION_TOKEN"]}
        finally:
            release.set()
            agent.stop()


def _call(m: InProcessMaster, method: str, path: str, headers: dict[str, str]) -> requests.Response:
    r = requests.request(
        method, m.url + path, json={}, headers=headers, timeout=30, params={"limit": 1},
        stream=True,
    )  # fmt: skip
    r.close()
    return r


@pytest.mark.parametrize(
    ("method", "rule", "allowed"), ROUTES, ids=[f"{m} {r}" for m, r, _ in ROUTES]
)
def test_each_route_admits_only_the_callers_marked_for_it(
    tokens: dict[str, Any], method: str, rule: str, allowed: frozenset[str]
) -> None:
    m: InProcessMaster = tokens["master"]
    path = _path(rule)
    callers = {
        "anonymous": {},
        "agent": {"Authorization": f"Bearer {m.agent_token}"},
        "task": {"Grpc-Metadata-x-allocation-token": f"Bearer {tokens['task']}"},
    }
    for who, headers in callers.items():
        if "public" in allowed:
            continue  # open to all by design (/info, /health, login)
        status = _call(m, method, path, headers).status_code
        if who in allowed:
            assert status not in (401,), (who, method, path, status)
        else:
            assert status in (401, 403), (who, method, path, status)
