"""Resource pools bound to workspaces (issue 27 item 7): the official CLI's ``det resource-pool
bindings``, Determined's rule (an unbound pool is everyone's, a bound one only its workspaces'),
workspace default pools, and refusals that name the pool and the workspace, with a real master
of two pools and SimAgents in each. The official CLI is a process of its own: the master is
served on a real port by a thread of the test's process, with its control loop
(tests/integration/threaded.py); nothing here needs a master process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.compat.official import ensure_official_venv
from tests.fakes.sim_agent import SimAgent
from tests.integration import cli_support
from tests.integration.cli_support import Det, sim_config
from tests.integration.conftest import ADMIN_PASSWORD, MasterClient
from tests.integration.test_official_client_answers import Official

pytestmark = pytest.mark.integration
det = cli_support.det


@pytest.fixture(scope="module")
def cli_master(pg_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A master of two static pools, ``default`` and ``team``, with an agent in each."""
    import uuid

    import psycopg

    from tests.integration.threaded import threaded_master

    name = f"det_rp_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    head, sep, query = pg_server.partition("?")
    base, _, _ = head.rpartition("/")
    pools = {"resource_pools": [{"pool_name": "default"}, {"pool_name": "team"}]}
    with threaded_master(
        tmp_path_factory.mktemp("rp-master"), f"{base}/{name}{sep}{query}", pools, loop=True
    ) as m:
        agents = [
            SimAgent(m.url, m.agent_token, f"rp-{pool}", slots=2, pool=pool).start()
            for pool in ("default", "team")
        ]
        try:
            yield m
        finally:
            for a in agents:
                a.stop()


def workspace(m: MasterClient, name: str, **extra: Any) -> int:
    return int(m.post("/api/v1/workspaces", {"name": name, **extra})["workspace"]["id"])


def project(m: MasterClient, ws: int, name: str) -> int:
    body = {"name": name, "workspaceId": ws}
    return int(m.post(f"/api/v1/workspaces/{ws}/projects", body)["project"]["id"])


def create(m: MasterClient, project_id: int, pool: str | None = None) -> requests.Response:
    config = sim_config("rp", trials=1) + (
        f"resources: {{resource_pool: {pool}}}\n" if pool else ""
    )
    body = {"config": config, "activate": True, "projectId": project_id}
    return m.session().post(f"{m.url}/api/v1/experiments", json=body, timeout=30)


def pool_of(m: MasterClient, eid: int) -> str:
    return str(m.get(f"/api/v1/experiments/{eid}")["experiment"]["resourcePool"])


def test_official_bindings_and_a_workspace_bound_to_one_pool_cannot_use_another(
    cli_master: MasterClient, tmp_path: Path
) -> None:
    m = cli_master
    research = workspace(m, "research")
    others = workspace(m, "others")
    o = Official(ensure_official_venv(), m, tmp_path)
    o("user", "login", "admin", stdin=ADMIN_PASSWORD + "\n")
    o("resource-pool", "bindings", "add", "team", "research")
    assert "research" in o("resource-pool", "bindings", "list-workspaces", "team")
    assert m.get("/api/v1/resource-pools/team/workspace-bindings")["workspaceIds"] == [research]

    # The bound pool is research's alone; the unbound default stays everyone's.
    ok = create(m, project(m, research, "p"), "team")
    assert ok.status_code == 200, ok.text
    eid = int(ok.json()["experiment"]["id"])
    cli_support.wait_state(m, eid, "STATE_COMPLETED", 90)
    assert pool_of(m, eid) == "team"
    refused = create(m, project(m, others, "p"), "team")
    assert refused.status_code == 400, refused.text
    message = refused.json()["message"]
    assert "'team'" in message and "'others'" in message and "\n" not in message, message
    assert "its pools: default" in message
    assert create(m, project(m, others, "q"), "default").status_code == 200

    # Tasks (a command) follow the same rule.
    cmd = {"config": {"entrypoint": ["true"], "resources": {"resource_pool": "team"}}}
    r = m.session().post(
        f"{m.url}/api/v1/commands", json={**cmd, "workspaceId": others}, timeout=30
    )
    assert r.status_code == 400 and "'team'" in r.json()["message"], r.text
    r = m.session().post(
        f"{m.url}/api/v1/commands", json={**cmd, "workspaceId": research}, timeout=30
    )
    assert r.status_code == 200, r.text

    # Moving an experiment of the team pool to a workspace that may not use it is refused.
    r = m.session().post(
        f"{m.url}/api/v1/experiments/{eid}/move",
        json={"destinationProjectId": project(m, others, "r"), "experimentId": eid},
        timeout=30,
    )
    assert r.status_code == 400 and "'team'" in r.json()["message"], r.text

    # det workspace list-pools (ListRPsBoundToWorkspace) tells each its pools.
    assert "team" in o("workspace", "list-pools", "research")
    assert "team" not in o("workspace", "list-pools", "others")

    o("resource-pool", "bindings", "replace", "team", "others")
    assert m.get("/api/v1/resource-pools/team/workspace-bindings")["workspaceIds"] == [others]
    o("resource-pool", "bindings", "remove", "team", "others")
    assert m.get("/api/v1/resource-pools/team/workspace-bindings").get("workspaceIds") in (None, [])
    assert create(m, project(m, others, "s"), "team").status_code == 200  # unbound: shared


def test_a_workspace_default_pool_places_what_names_none(
    cli_master: MasterClient, det: Det
) -> None:
    m = cli_master
    ws = workspace(m, "teamdefault", defaultComputePool="team", defaultAuxPool="team")
    r = create(m, project(m, ws, "p"))
    assert r.status_code == 200, r.text
    assert pool_of(m, int(r.json()["experiment"]["id"])) == "team"
    named = create(m, project(m, ws, "q"), "default")
    assert pool_of(m, int(named.json()["experiment"]["id"])) == "default"

    # A default the workspace may not use, or no such pool: refused, naming the field.
    workspace(m, "research2")
    m.post("/api/v1/resource-pools/default/workspace-bindings", {"workspaceNames": ["research2"]})
    s = m.session()
    r = s.post(f"{m.url}/api/v1/workspaces", json={"name": "x", "defaultComputePool": "nope"})
    assert r.status_code == 400 and "defaultComputePool" in r.json()["message"], r.text
    r = s.patch(f"{m.url}/api/v1/workspaces/{ws}", json={"defaultAuxPool": "default"})
    assert r.status_code == 400, r.text
    assert "defaultAuxPool" in r.json()["message"] and "'teamdefault'" in r.json()["message"]
    assert m.get(f"/api/v1/workspaces/{ws}")["workspace"]["defaultAuxPool"] == "team"

    det.login()
    r = det("workspace", "describe", "teamdefault")
    assert r.rc == 0, r.err
    assert "Resource pools it may use: team" in r.out
    r = det("resource-pool", "bindings", "list", "default")
    assert "research2" in r.out, r.out


def test_only_admins_bind_and_bad_requests_change_nothing(cli_master: MasterClient) -> None:
    m = cli_master
    m.post("/api/v1/users", {"user": {"username": "rp-user"}, "password": "Rp-user-pw1"})
    user = m.session(m.login("rp-user", "Rp-user-pw1"))
    url = f"{m.url}/api/v1/resource-pools/team/workspace-bindings"
    r = user.post(url, json={"workspaceNames": ["Uncategorized"]}, timeout=30)
    assert r.status_code == 403, r.text
    s = m.session()
    for body, field in (
        ({"workspaceNames": ["no-such"]}, "workspaceNames[0]"),
        ({}, "workspaceIds"),
    ):
        r = s.post(url, json=body, timeout=30)
        assert r.status_code in (400, 404) and field in r.json()["message"], r.text
    r = s.post(f"{m.url}/api/v1/resource-pools/nope/workspace-bindings",
               json={"workspaceNames": ["Uncategorized"]}, timeout=30)  # fmt: skip
    assert r.status_code == 404 and "'nope'" in r.json()["message"], r.text
    assert "Uncategorized" not in str(m.get("/api/v1/resource-pools/team/workspace-bindings"))
