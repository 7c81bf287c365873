"""The AWS provider against moto in server mode (a real HTTP endpoint; boto3 unchanged)."""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

import boto3
import pytest

from det.master.provisioner.aws import AwsProvider
from det.master.provisioner.config import AwsProviderConfig, parse_provider_config
from det.master.provisioner.decider import LaunchRecord, PoolSnapshot, decide, record_launch
from det.master.provisioner.provider import InstanceState, LaunchError, Market
from tests.fakes.moto_server import Ec2ErrorInjector

pytestmark = pytest.mark.integration

AMI = "ami-12c6146b"  # one of the AMI ids moto ships


def config(**kw: Any) -> AwsProviderConfig:
    parsed = parse_provider_config(
        {"type": "aws", "image_id": AMI, "instance_type": "p3.8xlarge", **kw}
    )
    assert isinstance(parsed, AwsProviderConfig)
    return parsed


def make(
    cfg: AwsProviderConfig | None = None, *, cluster_id: str = "c-1", pool: str = "gpu"
) -> AwsProvider:
    return AwsProvider.for_pool(
        cfg or config(),
        cluster_id=cluster_id,
        pool=pool,
        master_url="http://10.0.0.2:8080",
        agent_token="tok",
        sleep=lambda _: None,
    )


def ec2() -> Any:
    return boto3.client("ec2")


def tags(instance_id: str) -> dict[str, str]:
    [res] = ec2().describe_instances(InstanceIds=[instance_id])["Reservations"]
    return {t["Key"]: t["Value"] for t in res["Instances"][0].get("Tags", [])}


def test_launch_tags_and_user_data(aws_endpoint: str) -> None:
    provider = make()
    [inst] = provider.launch(provider.config.launch_options()[0], 1)
    assert inst.id.startswith("i-") and inst.instance_type == "p3.8xlarge"
    assert tags(inst.id)["det-cluster-id"] == "c-1"
    assert tags(inst.id)["det-pool"] == "gpu"
    assert tags(inst.id)["managed-by"] == "det"
    attr = ec2().describe_instance_attribute(InstanceId=inst.id, Attribute="userData")
    user_data = base64.b64decode(attr["UserData"]["Value"]).decode()
    assert user_data.startswith("#!/bin/bash")
    assert "export DET_MASTER_URL=http://10.0.0.2:8080" in user_data
    assert "export DET_RESOURCE_POOL=gpu" in user_data and "export DET_CLOUD=aws" in user_data


def test_list_finds_only_this_cluster_and_pool(aws_endpoint: str) -> None:
    mine = make()
    other_pool = make(pool="cpu")
    other_cluster = make(cluster_id="c-2")
    option = mine.config.launch_options()[0]
    ids = {i.id for i in mine.launch(option, 1)} | {i.id for i in mine.launch(option, 1)}
    other_pool.launch(option, 1)
    other_cluster.launch(option, 1)
    ec2().run_instances(ImageId=AMI, InstanceType="t3.micro", MinCount=1, MaxCount=1)  # unmanaged
    listed = mine.list_instances()
    assert {i.id for i in listed} == ids
    assert all(i.state is InstanceState.RUNNING for i in listed)
    assert all(i.launched_at.tzinfo is not None for i in listed)
    assert len(other_pool.list_instances()) == 1 and len(other_cluster.list_instances()) == 1


def test_terminate_is_idempotent(aws_endpoint: str) -> None:
    provider = make(config(subnet_id=ec2().describe_subnets()["Subnets"][0]["SubnetId"]))
    option = provider.config.launch_options()[0]
    a = provider.launch(option, 1)[0].id
    b = provider.launch(option, 1)[0].id
    provider.terminate([a])
    assert [i.id for i in provider.list_instances()] == [b]
    provider.terminate([a])  # twice: fine
    provider.terminate([a, b, "i-0123456789abcdef0"])  # with an unknown id: fine
    assert provider.list_instances() == []
    state = ec2().describe_instances(InstanceIds=[b])["Reservations"][0]["Instances"][0]["State"][
        "Name"
    ]
    assert state == "terminated"


def test_stopped_instances_are_listed_as_stopped(aws_endpoint: str) -> None:
    provider = make()
    [inst] = provider.launch(provider.config.launch_options()[0], 1)
    ec2().stop_instances(InstanceIds=[inst.id])
    [listed] = provider.list_instances()
    assert listed.state is InstanceState.STOPPED


def test_spot_launch_and_spot_request_cancelled_on_terminate(aws_endpoint: str) -> None:
    provider = make(config(spot=True, spot_max_price="3.00"))
    [inst] = provider.launch(provider.config.launch_options()[0], 1)
    assert inst.market is Market.SPOT
    assert [i.market for i in provider.list_instances()] == [Market.SPOT]
    # moto creates no spot request for RunInstances market options; make one as EC2 would.
    tag_spec = [
        {
            "ResourceType": "spot-instances-request",
            "Tags": [
                {"Key": "det-cluster-id", "Value": "c-1"},
                {"Key": "det-pool", "Value": "gpu"},
            ],
        }
    ]
    ec2().request_spot_instances(
        InstanceCount=1,
        LaunchSpecification={"ImageId": AMI, "InstanceType": "p3.8xlarge"},
        TagSpecifications=tag_spec,
    )
    [request] = ec2().describe_spot_instance_requests()["SpotInstanceRequests"]
    provider.terminate([request["InstanceId"]])
    assert ec2().describe_spot_instance_requests()["SpotInstanceRequests"] == []


def test_capacity_error_is_not_retried_into_success(aws_endpoint: str) -> None:
    provider = make()
    injector = Ec2ErrorInjector(
        provider.client, "RunInstances", "InsufficientInstanceCapacity", status=500
    )
    with pytest.raises(LaunchError) as info:
        provider.launch(provider.config.launch_options()[0], 1)
    assert (info.value.code, info.value.capacity) == ("InsufficientInstanceCapacity", True)
    assert injector.calls == 1  # botocore did not retry the 500 (it would now reach moto)
    assert provider.list_instances() == []


def test_quota_error_is_a_capacity_error(aws_endpoint: str) -> None:
    provider = make()
    Ec2ErrorInjector(provider.client, "RunInstances", "VcpuLimitExceeded", status=400)
    with pytest.raises(LaunchError) as info:
        provider.launch(provider.config.launch_options()[0], 1)
    assert info.value.capacity


def test_throttling_is_retried(aws_endpoint: str) -> None:
    provider = make()
    injector = Ec2ErrorInjector(
        provider.client, "RunInstances", "RequestLimitExceeded", status=503, times=2
    )
    assert len(provider.launch(provider.config.launch_options()[0], 1)) == 1
    assert injector.calls == 3
    assert len(provider.list_instances()) == 1


def test_decider_walks_the_fallback_list_on_capacity_errors(aws_endpoint: str) -> None:
    cfg = config(spot=True, fallback=[{"instance_type": "g5.12xlarge"}, {"spot": False}])
    provider = make(cfg)
    policy = cfg.scale_policy()
    Ec2ErrorInjector(provider.client, "RunInstances", "InsufficientInstanceCapacity", times=2)
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    history: tuple[LaunchRecord, ...] = ()
    tried = []
    for _ in range(3):
        decision = decide(PoolSnapshot(pool="gpu", demand=(4,), history=history), policy, now)
        [order] = decision.launches
        tried.append(order.option)
        try:
            provider.launch(order.option, order.count)
        except LaunchError as exc:
            history = record_launch(
                history, LaunchRecord(now, order.option, exc.code, exc.capacity), now
            )
        else:
            history = record_launch(history, LaunchRecord(now, order.option), now)
        now += dt.timedelta(seconds=1)
    assert tried == list(policy.options[:3])
    [inst] = provider.list_instances()
    assert (inst.instance_type, inst.market) == ("p3.8xlarge", Market.ON_DEMAND)


def test_explicit_endpoint_url_without_env(
    aws_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    provider = make(config(endpoint_url=aws_endpoint, region="us-east-1"))
    [inst] = provider.launch(provider.config.launch_options()[0], 1)
    assert [i.id for i in provider.list_instances()] == [inst.id]
