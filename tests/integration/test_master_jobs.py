"""The job queue as the API shows it, on the master's app in this process (the control loop's
passes run in the test's thread where the queue must move: det.master.loop.run_passes_until)."""

from __future__ import annotations

import pytest

from det.master.loop import run_passes_until
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration

CONFIG = """
name: queued
entrypoint: python3 train.py
searcher: {name: single, metric: loss}
hyperparameters: {lr: 0.1}
"""


def _job(m: InProcessMaster, job_id: str) -> dict[str, object]:
    (job,) = [j for j in m.get("/api/v1/job-queues")["jobs"] if j["jobId"] == job_id]
    return job


def _listed(m: InProcessMaster, job_id: str) -> bool:
    return any(j["jobId"] == job_id for j in m.get("/api/v1/job-queues")["jobs"]) or any(
        (j.get("full") or j.get("limited") or {}).get("jobId") == job_id
        for j in m.get("/api/v1/job-queues-v2")["jobs"]
    )


def _one_round_of_passes(m: InProcessMaster) -> None:
    rounds = iter(range(2))
    run_passes_until(m.state, lambda: next(rounds) == 1)


def test_a_paused_experiment_leaves_the_queue_and_returns_to_its_place(
    api_master: InProcessMaster,
) -> None:
    """Determined lists a job while it asks the resource manager for slots: a paused
    experiment, which asks for none, is not in `det job list`. Its job keeps its priority (a
    change while paused holds) and its place, and it is listed again once activated."""
    exp = api_master.post("/api/v1/experiments", {"config": CONFIG, "activate": False})
    eid, job_id = exp["experiment"]["id"], exp["experiment"]["jobId"]
    assert not _listed(api_master, job_id)
    other = api_master.post("/api/v1/experiments", {"config": CONFIG, "activate": True})
    other_job = other["experiment"]["jobId"]
    run_passes_until(api_master.state, lambda: _listed(api_master, other_job), 30)
    r = api_master.session().post(
        api_master.url + "/api/v1/job-queues",
        json={"updates": [{"jobId": job_id, "priority": 40}]},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    _one_round_of_passes(api_master)  # the paused one stays out whatever the loop does
    assert not _listed(api_master, job_id)

    api_master.post(f"/api/v1/experiments/{eid}/activate")
    run_passes_until(api_master.state, lambda: _job(api_master, job_id)["requestedSlots"] == 1, 30)
    job = _job(api_master, job_id)
    assert job["summary"]["state"] == "STATE_QUEUED"  # type: ignore[index]
    assert job["priority"] == 40
    # The pool has no agent: the queue says so (scheduler.fitting.why_waiting).
    assert job.get("pendingReason") == (
        "no agent can take work now (none connected, or all disabled or draining)"
    )
    # Priority 40 beats the other's 42: ahead of it, though submitted first and paused.
    order = [j["jobId"] for j in api_master.get("/api/v1/job-queues")["jobs"]]
    assert order.index(job_id) < order.index(other_job)

    api_master.post(f"/api/v1/experiments/{eid}/pause")
    run_passes_until(api_master.state, lambda: not _listed(api_master, job_id), 30)
    for x in (eid, other["experiment"]["id"]):
        api_master.post(f"/api/v1/experiments/{x}/kill")
