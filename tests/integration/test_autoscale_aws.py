"""Autoscaling end to end on AWS (moto in server mode): a real master with an AWS pool launches EC2
instances, each running instance becomes a real ``det-agent`` (tests/fakes/cloud_agents.py) that
runs the trials in Docker, and idle instances are terminated. The master is served on a real
port by a thread of the test's process with its control loop, whose provisioner pass drives the
cloud (``threaded_master_factory``, tests/integration/threaded.py); the agents are processes of
their own, and nothing checked needs a master process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.fakes.cloud_agents import CloudAgents, moto_lister
from tests.fakes.ec2_refusals import CapacityProxy
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
from tests.integration.cli_support import Det
from tests.integration.conftest import Master, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.docker]

POOL = "aws"
SLOTS = {"m5.large": 1, "m5.xlarge": 1}


def master_extra(endpoint: str, checkpoints: Path, **provider: Any) -> dict[str, Any]:
    block = {
        "type": "aws",
        "region": "us-east-1",
        "image_id": "ami-12c6146b",
        "instance_type": "m5.large",
        "instance_slots": 1,
        "max_instances": 2,
        "max_idle_agent_period": "5s",
        "max_agent_starting_period": "2m",
        "endpoint_url": endpoint,
        **provider,
    }
    checkpoints.mkdir(parents=True, exist_ok=True)  # a bind source must exist
    return {
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(checkpoints)},
        "resource_pools": [{"pool_name": POOL, "provider": block}],
        "resource_manager": {
            "default_compute_resource_pool": POOL,
            "default_aux_resource_pool": POOL,
        },
    }


def live_instances(endpoint: str, cid: str) -> list[dict[str, Any]]:
    ec2 = boto3.client("ec2", endpoint_url=endpoint, region_name="us-east-1")
    out = []
    for res in ec2.describe_instances(
        Filters=[
            {"Name": "tag:det-cluster-id", "Values": [cid]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    )["Reservations"]:
        out.extend(res["Instances"])
    return out


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[Any]:
    started: list[CloudAgents] = []

    def make(master: Master, endpoint: str) -> CloudAgents:
        cid = cluster_id(master)
        agents = CloudAgents(
            moto_lister(endpoint, cid),
            cloud="aws",
            master_url=master.url,
            agent_token=master.agent_token,
            cluster_id=cid,
            pool=POOL,
            slots=SLOTS,
            tmp=tmp_path / "machines",
        ).start()
        started.append(agents)
        return agents

    yield make
    for agents in started:
        agents.stop()


def test_four_trials_launch_two_instances_which_end_when_idle(
    threaded_master_factory: Any,
    aws_endpoint: str,
    cloud: Any,
    tmp_path: Path,
    capsys: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    docker_or_skip()
    # Prices and a cap that admits exactly max_instances: cost control must not get in the way.
    priced = {"prices": {"m5.large": 0.096, "m5.xlarge": 0.192}, "max_hourly_cost": 0.2}
    master = threaded_master_factory(
        extra=master_extra(aws_endpoint, tmp_path / "ckpt", cost=priced)
    )
    machines: CloudAgents = cloud(master, aws_endpoint)
    eid = create_experiment(master, experiment_config(trials=4, steps=3, pause=0.2, pool=POOL))
    wait_completed(master, eid)

    ts = trials(master, eid)
    assert len(ts) == 4
    assert all(t["state"] == "STATE_COMPLETED" for t in ts), ts
    # max_instances=2 held at every poll, and the two machines ran all four trials.
    assert machines.peak == 2
    assert len(machines.seen) == 2
    launched = pool_instances(master, POOL)
    assert sorted(i["id"] for i in launched) == sorted(machines.seen)
    assert {i["instanceType"] for i in launched} == {"m5.large"}

    cid = cluster_id(master)
    wait_for(lambda: not live_instances(aws_endpoint, cid), 60, 0.5, "idle instances to end")
    events = pool_events(master, POOL)
    kinds = [e["kind"] for e in events]
    assert kinds.count("launch") >= 1
    terminated = [e["message"] for e in events if e["kind"] == "terminate"]
    assert any("idle" in m for m in terminated), events
    assert all(i["terminatedAt"] for i in pool_instances(master, POOL))
    assert not machines.errors, machines.errors

    # What they cost, through the CLI.
    det = Det(master, tmp_path / "home", capsys, monkeypatch)
    det.login()
    cost = json.loads(det.ok("resource-pool", "cost", POOL, "--json").out)
    assert sorted(i["id"] for i in cost["instances"]) == sorted(machines.seen)
    assert cost["hourlyRate"] == 0 and not any(i["running"] for i in cost["instances"])
    assert all(i["hourlyPrice"] == 0.096 for i in cost["instances"])
    assert cost["spentThisMonth"] == pytest.approx(
        sum(i["costThisMonth"] for i in cost["instances"])
    )
    assert 0 < cost["spentThisMonth"] < 0.096 * 2  # two machines, well under an hour each
    assert "this month" in det.ok("resource-pool", "cost", POOL).out
    assert "idle" in det.ok("resource-pool", "events", POOL).out


def test_capacity_error_falls_back_to_the_next_instance_type(
    threaded_master_factory: Any, aws_endpoint: str, cloud: Any, tmp_path: Path
) -> None:
    docker_or_skip()
    proxy = CapacityProxy(aws_endpoint, "m5.large")
    try:
        extra = master_extra(
            proxy.url,
            tmp_path / "ckpt",
            fallback=[{"instance_type": "m5.xlarge", "instance_slots": 1}],
        )
        master = threaded_master_factory(extra=extra)
        machines: CloudAgents = cloud(master, aws_endpoint)
        eid = create_experiment(master, experiment_config(trials=2, steps=3, pause=0.2, pool=POOL))
        wait_completed(master, eid)
    finally:
        proxy.stop()
    assert proxy.refused >= 1
    launched = pool_instances(master, POOL)
    assert launched and {i["instanceType"] for i in launched} == {"m5.xlarge"}
    assert {i["optionIndex"] for i in launched} == {1}
    assert machines.peak <= 2
    events = pool_events(master, POOL)
    errors = [e["message"] for e in events if e["kind"] == "launch-error"]
    assert errors and "InsufficientInstanceCapacity" in errors[0], events
    assert any(e["kind"] == "fallback" and "m5.xlarge" in e["message"] for e in events), events
    assert all(t["state"] == "STATE_COMPLETED" for t in trials(master, eid))


def test_spot_notice_resumes_the_trial_on_another_instance_without_a_restart(
    threaded_master_factory: Any, aws_endpoint: str, cloud: Any, tmp_path: Path
) -> None:
    docker_or_skip()
    master = threaded_master_factory(extra=master_extra(aws_endpoint, tmp_path / "ckpt", spot=True))
    machines: CloudAgents = cloud(master, aws_endpoint)
    eid = create_experiment(master, experiment_config(trials=1, steps=40, pause=0.25, pool=POOL))

    def progressed() -> int:
        ts = trials(master, eid)
        return int(ts[0].get("totalBatchesProcessed") or 0) if ts else 0

    wait_for(lambda: progressed() >= 4, 180, 0.3, "the trial to make progress")
    (first,) = machines.running()
    machines.machine(first).trigger_notice()
    wait_completed(master, eid)

    (trial,) = trials(master, eid)
    assert trial["state"] == "STATE_COMPLETED"
    assert trial["restarts"] == 0
    assert len(machines.seen) == 2 and machines.seen[0] == first
    assert_resumed_elsewhere(master, trial["id"], first, machines.seen[1])
    cid = cluster_id(master)
    # The drained spot instance is idle and goes; so does the second once the trial is done.
    wait_for(lambda: not live_instances(aws_endpoint, cid), 60, 0.5, "instances to end")
