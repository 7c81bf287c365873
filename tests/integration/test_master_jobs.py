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


def test_a_paused_experiment_says_why_it_waits(live_master: Master) -> None:
    exp = live_master.post("/api/v1/experiments", {"config": CONFIG, "activate": False})
    eid, job_id = exp["experiment"]["id"], exp["experiment"]["jobId"]
    job = _job(live_master, job_id)
    assert job["requestedSlots"] == 0 and "paused" in str(job["pendingReason"])

    live_master.post(f"/api/v1/experiments/{eid}/activate")
    job = wait_for(
        lambda: (j := _job(live_master, job_id))["requestedSlots"] == 1 and j, 30, what="queued"
    )
    assert job["summary"]["state"] == "STATE_QUEUED"  # type: ignore[index]
    assert "paused" not in str(job["pendingReason"] or "")
