"""How many PostgreSQL connections one instance of a serverless master service holds, measured on
a real master process (its processes forked as on the platform) under a flood of users'
requests, against what the deploy budgets for it (det.deploy.common.serverless.Shape). GCP: the
API service, the task origin's service and the migration job must fit Cloud SQL's smallest
tier together (tests/unit/deploy/test_deploy_gcp_serverless.py checks the sum); AWS: the ECS
service's tasks, a deployment's overlap and the migration must fit Aurora Serverless v2 at its
maximum ACU (tests/unit/deploy/test_deploy_aws_serverless.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from typing import Any

import psycopg
import pytest
import requests

from det.deploy.aws import serverless as asl
from det.deploy.common import serverless as sl
from det.deploy.gcp import serverless as gsl
from tests.integration.conftest import Master

pytestmark = pytest.mark.integration


def _held(pg_url: str, dbname: str) -> int:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (dbname,),
        ).fetchone()
    return int(row[0]) if row else 0


SHAPES = {
    "gcp-api": gsl.API_SHAPE,
    "gcp-api-larger-tier": gsl.api_shape("db-custom-1-3840"),
    "gcp-tasks": gsl.TASKS_SHAPE,
    "aws": asl.SERVICE_SHAPE,
}


@pytest.mark.parametrize("role", sorted(SHAPES))
def test_one_instance_holds_at_most_its_connection_budget(
    master_factory: Any, pg_url: str, role: str
) -> None:
    shape: sl.Shape = SHAPES[role]
    one = dataclasses.replace(shape, instances=1)
    master: Master = master_factory(
        extra={
            "db_pool_size": one.pool,
            "api_processes": one.fronts,
            "user_api_processes": one.user_processes,
            "run_loops": one.loops,
        }
    )
    dbname = psycopg.conninfo.conninfo_to_dict(pg_url)["dbname"]
    session = master.session()
    stop = threading.Event()

    def flood(path: str) -> None:
        s = requests.Session()
        s.headers.update(session.headers)
        s.cookies.update(session.cookies)
        while not stop.is_set():
            with contextlib.suppress(requests.RequestException):  # a refused one counts too
                s.get(master.url + path, timeout=10)

    def beat(agent: str) -> None:
        """An agent's heartbeats: served by the front processes (users' requests go to the
        user processes), so every front's pool fills too."""
        s = requests.Session()
        s.headers["Authorization"] = f"Bearer {master.agent_token}"
        body = {"resourcePool": "default", "version": "t", "slots": [], "containers": []}
        while not stop.is_set():
            with contextlib.suppress(requests.RequestException):
                s.post(f"{master.url}/api/v1/agents/{agent}/heartbeat", json=body, timeout=10)

    paths = ["/api/v1/experiments", "/api/v1/me", "/info", "/api/v1/users", "/api/v1/agents"]
    threads = [
        threading.Thread(target=flood, args=(paths[i % len(paths)],), daemon=True)
        for i in range(16)
    ] + [threading.Thread(target=beat, args=(f"a{i}",), daemon=True) for i in range(16)]
    for t in threads:
        t.start()
    most = 0
    try:
        end = time.monotonic() + 8
        while time.monotonic() < end:
            most = max(most, _held(pg_url, dbname))
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=15)
    # Under the flood the pools fill (with more processes than one, more than any one of them
    # may hold: its pool and four listeners), and nothing a process opens beyond what Shape
    # counts may show up.
    alone = one.pool + (4 if one.fronts + one.user_processes > 1 else 0)
    print(f"{role}: {most} connections at most, {one.connections()} budgeted")
    assert alone < most <= one.connections(), (most, one)
