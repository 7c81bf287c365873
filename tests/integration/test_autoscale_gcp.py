"""Autoscaling end to end on GCP: a real master with a GCP pool drives the real
``google-cloud-compute`` client against FakeGce; each RUNNING instance becomes a real
``det-agent`` (tests/fakes/cloud_agents.py) running trials in Docker, with checkpoints in GCS
(gcp-storage-emulator). The master is served on a real port by a thread of the test's process
with its control loop, whose provisioner pass drives the cloud (``threaded_master_factory``,
tests/integration/threaded.py); the agents are processes of their own, and nothing checked needs
a master process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.cloud_agents import CloudAgents, gce_lister
from tests.fakes.gce import FakeGce
from tests.integration import storage_support
from tests.integration.autoscale_support import (
    assert_resumed_elsewhere,
    cluster_id,
    create_experiment,
    docker_or_skip,
    experiment_config,
    pool_events,
    pool_instances,
    trials,
    wait_completed,
)
from tests.integration.conftest import Master, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.docker]

POOL = "gcp"
ZONE_A, ZONE_B = "us-west1-a", "us-west1-b"
MACHINE = "n1-standard-4"
BUCKET = "det-autoscale"


@pytest.fixture(scope="module")
def gcs_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with storage_support.gcs_emulator(tmp_path_factory.mktemp("gcs")) as url:
        yield url


@pytest.fixture
def gce(gcs_emulator: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGce]:
    """FakeGce (pools point at it with ``endpoint_url``), and the storage emulator in the
    environment a master started now inherits (with our bucket)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    client = gcs.Client(project="test", credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    if not client.bucket(BUCKET).exists():
        client.create_bucket(BUCKET)
    with FakeGce() as fake:
        yield fake


def gcs_blobs() -> list[str]:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    client = gcs.Client(project="test", credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    return [b.name for b in client.list_blobs(BUCKET)]


def master_extra(emulator: str, **provider: Any) -> dict[str, Any]:
    block = {
        "type": "gcp",
        "project": "proj",
        "zone": ZONE_A,
        "boot_disk_source_image": "projects/proj/global/images/det-agent",
        "instance_type": {"machine_type": MACHINE, "gpu_type": "", "gpu_num": 0},
        "cpu_slots_allowed": True,
        "max_instances": 2,
        "max_idle_agent_period": "5s",
        "max_agent_starting_period": "2m",
        "fallback": [{"zone": ZONE_B}],
        **provider,
    }
    return {
        "checkpoint_storage": {"type": "gcs", "bucket": BUCKET, "prefix": "ckpt"},
        "resource_pools": [{"pool_name": POOL, "provider": block}],
        "resource_manager": {
            "default_compute_resource_pool": POOL,
            "default_aux_resource_pool": POOL,
        },
    }


def config(emulator: str, *, trials: int, steps: int, pause: float) -> str:
    env = f"""
  environment_variables: ["STORAGE_EMULATOR_HOST={emulator}", "GOOGLE_CLOUD_PROJECT=test"]
"""
    text = experiment_config(trials=trials, steps=steps, pause=pause, pool=POOL)
    return text.replace("  image: ", env.strip("\n") + "\n  image: ", 1)


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[Any]:
    started: list[CloudAgents] = []

    def make(master: Master, fake: FakeGce) -> CloudAgents:
        agents = CloudAgents(
            gce_lister(fake),
            cloud="gcp",
            master_url=master.url,
            agent_token=master.agent_token,
            cluster_id=cluster_id(master),
            pool=POOL,
            slots={MACHINE: 1},
            tmp=tmp_path / "machines",
        ).start()
        started.append(agents)
        return agents

    yield make
    for agents in started:
        agents.stop()


def test_four_trials_launch_two_vms_which_are_deleted_when_idle(
    threaded_master_factory: Any, gce: FakeGce, gcs_emulator: str, cloud: Any
) -> None:
    docker_or_skip()
    master = threaded_master_factory(extra=master_extra(gcs_emulator, endpoint_url=gce.url))
    machines: CloudAgents = cloud(master, gce)
    eid = create_experiment(master, config(gcs_emulator, trials=4, steps=3, pause=0.2))
    wait_completed(master, eid)

    ts = trials(master, eid)
    assert len(ts) == 4 and all(t["state"] == "STATE_COMPLETED" for t in ts), ts
    assert machines.peak == 2 and len(machines.seen) == 2
    launched = pool_instances(master, POOL)
    assert sorted(i["id"] for i in launched) == sorted(machines.seen)
    assert {i["zone"] for i in launched} == {ZONE_A}
    # The checkpoints went to GCS: every trial has one, stored in the emulator's bucket.
    stored = gcs_blobs()
    for t in ts:
        assert any(name.startswith(f"ckpt/{t['latestCheckpointUuid']}/") for name in stored), t
    wait_for(lambda: not gce.instances(), 60, 0.5, "idle VMs to be deleted")
    events = pool_events(master, POOL)
    assert any(e["kind"] == "terminate" and "idle" in e["message"] for e in events), events
    assert not machines.errors, machines.errors


def test_exhausted_zone_falls_back_to_the_next_zone(
    threaded_master_factory: Any, gce: FakeGce, gcs_emulator: str, cloud: Any
) -> None:
    docker_or_skip()
    gce.fail_zone(ZONE_A)
    master = threaded_master_factory(extra=master_extra(gcs_emulator, endpoint_url=gce.url))
    machines: CloudAgents = cloud(master, gce)
    eid = create_experiment(master, config(gcs_emulator, trials=2, steps=3, pause=0.2))
    wait_completed(master, eid)

    launched = pool_instances(master, POOL)
    assert launched and {i["zone"] for i in launched} == {ZONE_B}
    assert {i["optionIndex"] for i in launched} == {1}
    assert machines.peak <= 2
    events = pool_events(master, POOL)
    errors = [e["message"] for e in events if e["kind"] == "launch-error"]
    assert errors and "ZONE_RESOURCE_POOL_EXHAUSTED" in errors[0], events
    assert any(e["kind"] == "fallback" and ZONE_B in e["message"] for e in events), events
    assert all(t["state"] == "STATE_COMPLETED" for t in trials(master, eid))


def test_preemption_notice_resumes_the_trial_from_gcs_on_another_vm_without_a_restart(
    threaded_master_factory: Any, gce: FakeGce, gcs_emulator: str, cloud: Any
) -> None:
    docker_or_skip()
    master = threaded_master_factory(
        extra=master_extra(gcs_emulator, endpoint_url=gce.url, spot=True)
    )
    machines: CloudAgents = cloud(master, gce)
    eid = create_experiment(master, config(gcs_emulator, trials=1, steps=40, pause=0.25))

    def progressed() -> int:
        ts = trials(master, eid)
        return int(ts[0].get("totalBatchesProcessed") or 0) if ts else 0

    wait_for(lambda: progressed() >= 4, 180, 0.3, "the trial to make progress")
    (first,) = machines.running()
    machines.machine(first).trigger_notice()
    # A second VM comes up for the re-queued trial; then GCE deletes the Spot VM, as it does.
    wait_for(lambda: len(machines.seen) >= 2, 120, 0.3, "a replacement VM")
    gce.preempt(first)
    wait_completed(master, eid)

    (trial,) = trials(master, eid)
    assert trial["state"] == "STATE_COMPLETED"
    assert trial["restarts"] == 0
    assert len(machines.seen) == 2 and machines.seen[0] == first
    assert_resumed_elsewhere(master, trial["id"], first, machines.seen[1])
    wait_for(lambda: not gce.instances(), 60, 0.5, "VMs to be deleted")


def test_an_hourly_cost_cap_holds_the_pool_to_what_it_pays_for(
    threaded_master_factory: Any, gce: FakeGce, gcs_emulator: str, cloud: Any
) -> None:
    """max_instances would allow 2 VMs; a $0.30/h cap at $0.19/h per VM allows 1. The search
    still completes, one trial after the other, and the queue says why it waits."""
    docker_or_skip()
    cost = {"prices": {MACHINE: 0.19}, "max_hourly_cost": 0.3}
    master = threaded_master_factory(
        extra=master_extra(gcs_emulator, endpoint_url=gce.url, cost=cost)
    )
    machines: CloudAgents = cloud(master, gce)
    eid = create_experiment(master, config(gcs_emulator, trials=2, steps=3, pause=0.5))

    def capped_reason() -> str | None:
        for job in master.get("/api/v1/job-queues")["jobs"]:
            if "max_hourly_cost" in str(job.get("pendingReason") or ""):
                return str(job["pendingReason"])
        return None

    reason = wait_for(capped_reason, 60, 0.3, "the cost cap to show in the job queue")
    assert "max_hourly_cost=$0.30/h" in reason and "$0.19/h each" in reason
    wait_completed(master, eid)
    assert all(t["state"] == "STATE_COMPLETED" for t in trials(master, eid))
    assert machines.peak == 1
    assert any(e["kind"] == "cost-cap" for e in pool_events(master, POOL))
    assert not machines.errors, machines.errors
