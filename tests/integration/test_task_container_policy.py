"""The task container policy (det.master.container_policy): a non-admin's task that would own
the agent's host is refused at create, naming the field and the rule, and nothing is created; an
admin's is accepted. All on the master's app in the test's process (``api_master``, and
``api_master_factory`` for a cluster's own policy and defaults); what must run after a create
(an experiment's trial, a kill's end) is moved by the loop's passes in the test's thread
(det.master.loop.run_passes_until)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import requests
import yaml

from det.master.loop import run_passes_until
from tests.integration.conftest import MasterClient
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration

# The attack, item by item, and the field each refusal must name.
BAD: list[tuple[dict[str, Any], str]] = [
    ({"bind_mounts": [{"host_path": "/root", "container_path": "/r"}]}, "bind_mounts[0].host_path"),
    ({"bind_mounts": [{"host_path": "/etc", "container_path": "/e"}]}, "bind_mounts[0].host_path"),
    (
        {"bind_mounts": [{"host_path": "/var/run", "container_path": "/v", "read_only": True}]},
        "bind_mounts[0].host_path",
    ),
    (
        {"bind_mounts": [{"host_path": "/tmp/../etc/", "container_path": "/e"}]},
        "bind_mounts[0].host_path",
    ),
    ({"environment": {"add_capabilities": ["SYS_ADMIN"]}}, "environment.add_capabilities[0]"),
    (
        {"resources": {"devices": [{"host_path": "/dev/kmsg", "container_path": "/dev/kmsg"}]}},
        "resources.devices[0].host_path",
    ),
    (
        {"checkpoint_storage": {"type": "shared_fs", "host_path": "/root"}},
        "checkpoint_storage.host_path",
    ),
]
IDS = ["root", "etc", "var-run", "dotdot", "sys-admin", "kmsg", "storage"]

EXPERIMENT = {
    "name": "policy",
    "entrypoint": "true",
    "searcher": {"name": "single", "metric": "loss", "max_length": 10},
}


@pytest.fixture
def users(request: pytest.FixtureRequest) -> tuple[requests.Session, requests.Session]:
    """carol (no admin) and the admin, on the test's ``api_master``."""
    m: MasterClient = request.getfixturevalue("api_master")
    m.post("/api/v1/users", {"user": {"username": "carol"}, "password": "carol-pw-123"})
    return m.session(m.login("carol", "carol-pw-123")), m.session()


def _counts(pg_url: str) -> tuple[int, int, int]:
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM ntsc_tasks), (SELECT count(*) FROM experiments),"
            " (SELECT count(*) FROM allocations)"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def _refused(r: requests.Response, field: str) -> None:
    assert r.status_code == 403, (r.status_code, r.text)
    message = r.json().get("message") or r.json().get("error", {}).get("error", "")
    assert message.startswith(f"task container policy: {field}: "), message
    assert "\n" not in message


@pytest.mark.parametrize(("bad", "field"), BAD, ids=IDS)
def test_a_non_admins_task_breaking_the_policy_is_refused_and_nothing_is_created(
    api_master: MasterClient,
    pg_url: str,
    users: tuple[requests.Session, requests.Session],
    bad: dict[str, Any],
    field: str,
) -> None:
    m = api_master
    carol, admin = users
    before = _counts(pg_url)
    # Tasks have no checkpoint_storage of their own (experiments do).
    routes = () if "checkpoint_storage" in bad else ("commands", "notebooks", "shells")
    for route in routes:
        config = {**bad, "entrypoint": ["true"]} if route == "commands" else dict(bad)
        r = carol.post(f"{m.url}/api/v1/{route}", json={"config": config}, timeout=30)
        _refused(r, field)
    exp = yaml.safe_dump({**EXPERIMENT, **bad})
    r = carol.post(f"{m.url}/api/v1/experiments", json={"config": exp}, timeout=30)
    _refused(r, field)
    r = carol.post(
        f"{m.url}/api/v1/experiments", json={"config": exp, "validateOnly": True}, timeout=30
    )
    _refused(r, field)
    assert _counts(pg_url) == before

    # The admin may do anything.
    for route in routes[:1]:
        body = {"config": {**bad, "entrypoint": ["true"]}}
        r = admin.post(f"{m.url}/api/v1/{route}", json=body, timeout=30)
        assert r.status_code == 200, r.text
    r = admin.post(f"{m.url}/api/v1/experiments", json={"config": exp}, timeout=30)
    assert r.status_code == 200, r.text


def test_a_template_does_not_carry_a_non_admin_past_the_policy(
    api_master: MasterClient, pg_url: str, users: tuple[requests.Session, requests.Session]
) -> None:
    m = api_master
    carol, admin = users
    template = {"bind_mounts": [{"host_path": "/etc", "container_path": "/e"}]}
    r = admin.post(
        f"{m.url}/api/v1/templates/host-etc",
        json={"name": "host-etc", "config": template, "workspaceId": 1},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    before = _counts(pg_url)
    r = carol.post(
        f"{m.url}/api/v1/commands",
        json={"config": {"entrypoint": ["true"]}, "templateName": "host-etc"},
        timeout=30,
    )
    _refused(r, "bind_mounts[0].host_path")
    exp = yaml.safe_dump({**EXPERIMENT, "template": "host-etc"})
    r = carol.post(f"{m.url}/api/v1/experiments", json={"config": exp}, timeout=30)
    _refused(r, "bind_mounts[0].host_path")
    assert _counts(pg_url) == before


def test_what_the_policy_allows_and_the_clusters_own_defaults_pass(
    api_master_factory: Any, pg_url: str, tmp_path: Any
) -> None:
    data = tmp_path / "datasets"
    shared = tmp_path / "shared"
    m: InProcessMaster = api_master_factory(
        extra={
            "task_container_policy": {
                "bind_mounts": [{"host_path": str(data), "read_only": True}],
                "add_capabilities": [],
                "devices": [],
            },
            "task_container_defaults": {
                "bind_mounts": [{"host_path": str(shared), "container_path": "/shared"}],
            },
        }
    )
    m.post("/api/v1/users", {"user": {"username": "dave"}, "password": "dave-pw-123"})
    dave = m.session(m.login("dave", "dave-pw-123"))

    def launch(config: dict[str, Any]) -> requests.Response:
        body = {"config": {**config, "entrypoint": ["true"]}}
        return dave.post(f"{m.url}/api/v1/commands", json=body, timeout=30)

    ok = launch(
        {"bind_mounts": [{"host_path": f"{data}/x", "container_path": "/d", "read_only": True}]}
    )
    assert ok.status_code == 200, ok.text
    writable = launch({"bind_mounts": [{"host_path": str(data), "container_path": "/d"}]})
    _refused(writable, "bind_mounts[0].host_path")
    assert "may be mounted read-only only" in writable.json()["message"]
    elsewhere = launch(
        {"bind_mounts": [{"host_path": str(tmp_path / "x"), "container_path": "/d"}]}
    )
    _refused(elsewhere, "bind_mounts[0].host_path")
    ptrace = launch({"environment": {"add_capabilities": ["SYS_PTRACE"]}})
    _refused(ptrace, "environment.add_capabilities[0]")
    # The cluster's own mount (and the master's storage) are the admin's: always allowed.
    ok = launch({"bind_mounts": [{"host_path": f"{shared}/", "container_path": "/shared"}]})
    assert ok.status_code == 200, ok.text


def test_continue_and_tensorboards_are_held_to_the_policy_too(
    api_master: InProcessMaster, pg_url: str, users: tuple[requests.Session, requests.Session]
) -> None:
    m = api_master
    carol, admin = users
    # Continue: carol's own experiment, ended, continued with a host mount in the override.
    r = carol.post(
        f"{m.url}/api/v1/experiments", json={"config": yaml.safe_dump(EXPERIMENT)}, timeout=30
    )
    assert r.status_code == 200, r.text
    eid = int(r.json()["experiment"]["id"])
    run_passes_until(
        m.state,
        lambda: carol.get(f"{m.url}/api/v1/experiments/{eid}/trials", timeout=30).json()["trials"],
        60,
    )
    assert carol.post(f"{m.url}/api/v1/experiments/{eid}/kill", timeout=30).status_code == 200

    def ended() -> bool:
        r = carol.get(f"{m.url}/api/v1/experiments/{eid}", timeout=30)
        return bool(r.json()["experiment"]["state"] == "STATE_CANCELED")

    run_passes_until(m.state, ended, 60)
    override = yaml.safe_dump({"bind_mounts": [{"host_path": "/root", "container_path": "/r"}]})
    r = carol.post(
        f"{m.url}/api/v1/experiments/continue",
        json={"id": eid, "overrideConfig": override},
        timeout=30,
    )
    _refused(r, "bind_mounts[0].host_path")
    r = carol.get(f"{m.url}/api/v1/experiments/{eid}", timeout=30)
    assert r.json()["experiment"]["state"] == "STATE_CANCELED"

    # TensorBoard: an admin's experiment keeps its checkpoints in /etc (admins may); carol's
    # TensorBoard of it would mount that read-only.
    exp = yaml.safe_dump(
        {**EXPERIMENT, "checkpoint_storage": {"type": "shared_fs", "host_path": "/etc"}}
    )
    r = admin.post(f"{m.url}/api/v1/experiments", json={"config": exp}, timeout=30)
    assert r.status_code == 200, r.text
    admins = int(r.json()["experiment"]["id"])
    run_passes_until(
        m.state,
        lambda: admin.get(f"{m.url}/api/v1/experiments/{admins}/trials", timeout=30).json()[
            "trials"
        ],
        60,
    )
    before = _counts(pg_url)[0]
    r = carol.post(f"{m.url}/api/v1/tensorboards", json={"experimentIds": [admins]}, timeout=30)
    _refused(r, f"experimentIds: experiment {admins}'s checkpoint_storage.host_path")
    assert _counts(pg_url)[0] == before
    r = admin.post(f"{m.url}/api/v1/tensorboards", json={"experimentIds": [admins]}, timeout=30)
    assert r.status_code == 200, r.text
