"""Bad requests get a 4xx naming the problem and change nothing. On the master's app in the
test's process: ``api_master``, and ``loop_master`` (its control loop running) where a SimAgent
or the job queue takes part."""

from __future__ import annotations

import base64
from typing import Any

import psycopg
import pytest

from tests.fakes.sim_agent import SimAgent, wait
from tests.integration.conftest import MasterClient
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration

GOOD = """
name: ok
entrypoint: python3 train.py
searcher: {name: single, metric: loss}
hyperparameters: {lr: 0.1}
"""


def counts(pg_url: str) -> tuple[int, ...]:
    with psycopg.connect(pg_url) as conn:
        return tuple(
            int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])  # type: ignore[index]
            for t in ("experiments", "jobs", "trials", "allocations", "searcher_events")
        )


@pytest.mark.parametrize(
    ("config", "status", "needle"),
    [
        ("name: [unclosed", 400, "invalid YAML"),
        (GOOD + "bogus_field: 1\n", 400, "bogus_field"),
        (
            GOOD.replace(
                "hyperparameters: {lr: 0.1}", "hyperparameters: {lr: 0.1}\nmax_restarts: lots"
            ),
            400,
            "max_restarts",
        ),
        (GOOD + "resources: {slots_per_trial: -1}\n", 400, "resources.slots_per_trial"),
        (GOOD.replace("name: single", "name: telepathy"), 400, "telepathy"),
        (GOOD + "resources: {resource_pool: nowhere}\n", 400, "nowhere"),
    ],
    ids=[
        "malformed-yaml",
        "unknown-field",
        "wrong-type",
        "negative-slots",
        "unknown-searcher",
        "unknown-pool",
    ],
)
def test_bad_config_is_refused_and_nothing_written(
    api_master: MasterClient, pg_url: str, config: str, status: int, needle: str
) -> None:
    before = counts(pg_url)
    r = api_master.session().post(
        api_master.url + "/api/v1/experiments",
        json={"config": config, "activate": True},
        timeout=30,
    )
    assert r.status_code == status, r.text
    assert needle in r.json()["message"]
    assert counts(pg_url) == before


def test_oversize_context_is_refused_naming_the_largest_file(
    api_master: MasterClient, pg_url: str
) -> None:
    before = counts(pg_url)
    big = base64.b64encode(b"\0" * (96 * 1024 * 1024)).decode()
    body: dict[str, Any] = {
        "config": GOOD,
        "modelDefinition": [
            {"path": "train.py", "type": 48, "content": base64.b64encode(b"print(1)").decode()},
            {"path": "data/huge.bin", "type": 48, "content": big},
        ],
    }
    r = api_master.session().post(api_master.url + "/api/v1/experiments", json=body, timeout=120)
    assert r.status_code == 413
    assert "data/huge.bin" in r.json()["message"] and "95 MB" in r.json()["message"]
    assert counts(pg_url) == before


def test_job_that_can_never_fit_is_refused(loop_master: InProcessMaster, pg_url: str) -> None:
    agent = SimAgent(loop_master.url, loop_master.agent_token, "sim-0", slots=2).start()
    try:
        wait(lambda: loop_master.get("/api/v1/agents")["agents"], 30, "agent registered")
        before = counts(pg_url)
        r = loop_master.session().post(
            loop_master.url + "/api/v1/experiments",
            json={"config": GOOD + "resources: {slots_per_trial: 4}\n", "activate": True},
            timeout=30,
        )
        assert r.status_code == 400
        assert "slots_per_trial" in r.json()["message"] and "2" in r.json()["message"]
        assert counts(pg_url) == before
    finally:
        agent.stop()


def test_bad_metric_report_is_refused(api_master: MasterClient) -> None:
    r = api_master.session().post(
        api_master.url + "/api/v1/trials/999999/metrics",
        json={
            "group": "training",
            "metrics": {"trialRunId": 1, "stepsCompleted": 1, "metrics": {"avgMetrics": {"x": 1}}},
        },
        timeout=10,
    )
    assert r.status_code == 404
    r = api_master.session().post(
        api_master.url + "/api/v1/trials/1/metrics", json={"group": "training"}, timeout=10
    )
    assert r.status_code == 400 and "metrics" in r.json()["message"]


def test_job_update_with_bad_priority_changes_nothing(loop_master: InProcessMaster) -> None:
    # Active: a paused experiment is not in the queue (as in Determined).
    eid = loop_master.post("/api/v1/experiments", {"config": GOOD, "activate": True})["experiment"][
        "id"
    ]
    job_id = loop_master.get(f"/api/v1/experiments/{eid}")["experiment"]["jobId"]
    r = loop_master.session().post(
        loop_master.url + "/api/v1/job-queues",
        json={"updates": [{"jobId": job_id, "priority": 500}]},
        timeout=10,
    )
    assert r.status_code == 400 and "priority" in r.json()["message"]
    assert [
        j["priority"] for j in loop_master.get("/api/v1/job-queues")["jobs"] if j["jobId"] == job_id
    ] == [42]


def test_non_finite_metrics_are_stored_as_strings(loop_master: InProcessMaster) -> None:
    agent = SimAgent(
        loop_master.url, loop_master.agent_token, "sim-0", train=lambda m, s, k: (k.wait(30), 0)[1]
    ).start()
    try:
        eid = loop_master.post("/api/v1/experiments", {"config": GOOD, "activate": True})[
            "experiment"
        ]["id"]
        trial = wait(
            lambda: loop_master.get(f"/api/v1/experiments/{eid}/trials")["trials"], 30, "trial"
        )[0]
        body = '{"group": "validation", "metrics": {"trialRunId": 1, "stepsCompleted": 3, "metrics": {"avgMetrics": {"loss": NaN, "acc": Infinity, "x\\\\y": 1.5}}}}'
        r = loop_master.session().post(
            f"{loop_master.url}/api/v1/trials/{trial['id']}/metrics",
            data=body,
            headers={"Content-Type": "application/json"},
            timeout=10,
        )
        assert r.status_code == 200, r.text
        rows = loop_master.get(
            f"/api/v1/trials/{trial['id']}/metrics", params={"group": "validation"}
        )["metrics"]
        assert rows[0]["metrics"]["avg_metrics"] == {"loss": "NaN", "acc": "Infinity", "x\\y": 1.5}
    finally:
        agent.stop()


def test_searcher_that_cannot_be_built_is_refused(api_master: MasterClient, pg_url: str) -> None:
    before = counts(pg_url)
    cfg = GOOD.replace(
        "searcher: {name: single, metric: loss}", "searcher: {name: grid, metric: loss}"
    ).replace(
        "hyperparameters: {lr: 0.1}",
        "hyperparameters: {lr: {type: double, minval: 0.1, maxval: 1.0}}",
    )
    r = api_master.session().post(
        api_master.url + "/api/v1/experiments", json={"config": cfg, "activate": True}, timeout=30
    )
    assert r.status_code == 400, r.text
    assert "count" in r.json()["message"]
    assert counts(pg_url) == before


_DEEP = b'{"username": ' + b"[" * 5000 + b"]" * 5000 + b"}"


@pytest.mark.parametrize(
    ("method", "path", "data", "needle"),
    [
        ("POST", "/api/v1/auth/login", _DEEP, "nested too deeply"),
        ("POST", "/api/v1/auth/login", b'{"username": "ad\\u0000min", "password": "x"}', "NUL"),
        ("POST", "/api/v1/models", b'{"name": "m\\u0000"}', "NUL"),
        ("GET", "/api/v1/experiments?limit=9223372036854775808", None, "limit"),
        ("GET", "/api/v1/experiments?offset=-1", None, "OFFSET"),
        ("GET", "/api/v1/experiments?offset=99999999999999999999", None, "offset"),
    ],
)
def test_malformed_input_is_a_400_naming_the_problem_not_a_500(
    api_master: MasterClient, method: str, path: str, data: bytes | None, needle: str
) -> None:
    r = api_master.session().request(
        method,
        api_master.url + path,
        data=data,
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 400, r.text
    assert needle.lower() in r.json()["message"].lower(), r.text


def test_oversize_fields_are_413_naming_the_field_and_change_nothing(
    api_master: MasterClient,
) -> None:
    s = api_master.session()
    r = s.post(api_master.url + "/api/v1/models", json={"name": "m" * 10_000_000}, timeout=60)
    assert r.status_code == 413, r.text[:300]
    assert "name" in r.json()["message"] and "limit" in r.json()["message"]
    assert api_master.get("/api/v1/models")["models"] == []
    cfg = "name: n\nentrypoint: x\nsearcher: {name: single, metric: loss, max_length: 1}\n"
    eid = int(api_master.post("/api/v1/experiments", {"config": cfg})["experiment"]["id"])
    r = s.patch(
        f"{api_master.url}/api/v1/experiments/{eid}", json={"notes": "n" * 2_000_000}, timeout=60
    )
    assert r.status_code == 413, r.text[:300]
    assert "notes" in r.json()["message"]
    assert api_master.get(f"/api/v1/experiments/{eid}")["experiment"]["notes"] == ""
