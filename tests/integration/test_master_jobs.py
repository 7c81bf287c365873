"""The job queue as the API shows it."""

from __future__ import annotations

import pytest

from tests.integration.conftest import Master, wait_for

pytestmark = pytest.mark.integration

CONFIG = """
name: queued
entrypoint: python3 train.py
searcher: {name: single, metric: loss}
hyperparameters: {lr: 0.1}
"""


def _job(m: Master, job_id: str) -> dict[str, object]:
    (job,) = [j for j in m.get("/api/v1/job-queues")["jobs"] if j["jobId"] == job_id]
    return job


def _listed(m: Master, job_id: str) -> bool:
    return any(j["jobId"] == job_id for j in m.get("/api/v1/job-queues")["jobs"]) or any(
        (j.get("full") or j.get("limited") or {}).get("jobId") == job_id
        for j in m.get("/api/v1/job-queues-v2")["jobs"]
    )


def test_a_paused_experiment_leaves_the_queue_and_returns_to_its_place(
    live_master: Master,
) -> None:
    """Determined lists a job while it asks the resource manager for slots: a paused
    experiment, which asks for none, is not in `det job list`. Its job keeps its priority (a
    change while paused holds) and its place, and it is listed again once activated."""
    exp = live_master.post("/api/v1/experiments", {"config": CONFIG, "activate": False})
    eid, job_id = exp["experiment"]["id"], exp["experiment"]["jobId"]
    assert not _listed(live_master, job_id)
    other = live_master.post("/api/v1/experiments", {"config": CONFIG, "activate": True})
    other_job = other["experiment"]["jobId"]
    wait_for(lambda: _listed(live_master, other_job), 30, what="the active one listed")
    r = live_master.session().post(
        live_master.url + "/api/v1/job-queues",
        json={"updates": [{"jobId": job_id, "priority": 40}]},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    assert not _listed(live_master, job_id)

    live_master.post(f"/api/v1/experiments/{eid}/activate")
    job = wait_for(
        lambda: (j := _job(live_master, job_id))["requestedSlots"] == 1 and j, 30, what="queued"
    )
    assert job["summary"]["state"] == "STATE_QUEUED"  # type: ignore[index]
    assert job["priority"] == 40 and not job.get("pendingReason")
    # Priority 40 beats the other's 42: ahead of it, though submitted first and paused.
    order = [j["jobId"] for j in live_master.get("/api/v1/job-queues")["jobs"]]
    assert order.index(job_id) < order.index(other_job)

    live_master.post(f"/api/v1/experiments/{eid}/pause")
    wait_for(lambda: not _listed(live_master, job_id), 30, what="left the queue")
    for x in (eid, other["experiment"]["id"]):
        live_master.post(f"/api/v1/experiments/{x}/kill")
