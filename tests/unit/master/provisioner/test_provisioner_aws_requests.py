"""AWS provider: pure request builders (table tests) and the retry / error mapping policy."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from det.master.provisioner import aws
from det.master.provisioner.aws import (
    AwsProvider,
    describe_filters,
    instance_from_description,
    run_instances_request,
)
from det.master.provisioner.config import AwsProviderConfig, parse_provider_config
from det.master.provisioner.provider import (
    QUOTA_CODES,
    InstanceState,
    LaunchError,
    LaunchOption,
    Market,
)


def config(**kw: Any) -> AwsProviderConfig:
    parsed = parse_provider_config(
        {"type": "aws", "image_id": "ami-1", "instance_type": "p3.8xlarge", **kw}
    )
    assert isinstance(parsed, AwsProviderConfig)
    return parsed


def build(
    cfg: AwsProviderConfig, option: LaunchOption | None = None, count: int = 2
) -> dict[str, Any]:
    return run_instances_request(
        cfg,
        option or cfg.launch_options()[0],
        count,
        cluster_id="c-1",
        pool="gpu",
        user_data="#!/bin/bash\necho hi\n",
        client_token="tok-1",
    )


def tags_of(request: dict[str, Any], resource: str = "instance") -> dict[str, str]:
    [spec] = [s for s in request["TagSpecifications"] if s["ResourceType"] == resource]
    return {t["Key"]: t["Value"] for t in spec["Tags"]}


def test_minimal_request() -> None:
    request = build(config())
    assert request["ImageId"] == "ami-1"
    assert request["InstanceType"] == "p3.8xlarge"
    assert (request["MinCount"], request["MaxCount"]) == (1, 2)
    assert request["UserData"].startswith("#!/bin/bash")
    assert request["ClientToken"] == "tok-1"
    assert request["BlockDeviceMappings"] == [
        {
            "DeviceName": "/dev/sda1",
            "Ebs": {"VolumeSize": 200, "VolumeType": "gp3", "DeleteOnTermination": True},
        }
    ]
    assert request["MetadataOptions"]["HttpTokens"] == "required"
    for key in (
        "InstanceMarketOptions",
        "IamInstanceProfile",
        "NetworkInterfaces",
        "SecurityGroupIds",
        "KeyName",
        "Placement",
    ):
        assert key not in request
    assert [s["ResourceType"] for s in request["TagSpecifications"]] == ["instance", "volume"]


def test_tags_carry_cluster_pool_and_managed_by() -> None:
    request = build(
        config(tag_key="det-stack", tag_value="agent", custom_tags=[{"key": "team", "value": "ml"}])
    )
    assert tags_of(request) == {
        "Name": "det-agent",
        "det-cluster-id": "c-1",
        "det-pool": "gpu",
        "managed-by": "det",
        "det-market": "on_demand",
        "det-stack": "agent",
        "team": "ml",
    }
    assert tags_of(request, "volume") == tags_of(request)


def test_custom_tags_cannot_override_ours() -> None:
    request = build(config(custom_tags=[{"key": "det-pool", "value": "other"}]))
    assert tags_of(request)["det-pool"] == "gpu"


@pytest.mark.parametrize(
    ("kw", "option_zone", "expected"),
    [
        (
            {"iam_instance_profile_arn": "arn:aws:iam::1:instance-profile/a"},
            None,
            {"IamInstanceProfile": {"Arn": "arn:aws:iam::1:instance-profile/a"}},
        ),
        ({"ssh_key_name": "k"}, None, {"KeyName": "k"}),
        ({"security_group_id": "sg-1"}, None, {"SecurityGroupIds": ["sg-1"]}),
        (
            {"root_volume_size": 500},
            None,
            {
                "BlockDeviceMappings": [
                    {
                        "DeviceName": "/dev/sda1",
                        "Ebs": {
                            "VolumeSize": 500,
                            "VolumeType": "gp3",
                            "DeleteOnTermination": True,
                        },
                    }
                ]
            },
        ),
        (
            {"subnet_id": "subnet-a", "security_group_id": "sg-1"},
            "subnet-a",
            {
                "NetworkInterfaces": [
                    {
                        "DeviceIndex": 0,
                        "SubnetId": "subnet-a",
                        "AssociatePublicIpAddress": True,
                        "DeleteOnTermination": True,
                        "Groups": ["sg-1"],
                    }
                ]
            },
        ),
        (
            {"network_interface": {"public_ip": False, "subnet_id": "subnet-a"}},
            "subnet-a",
            {
                "NetworkInterfaces": [
                    {
                        "DeviceIndex": 0,
                        "SubnetId": "subnet-a",
                        "AssociatePublicIpAddress": False,
                        "DeleteOnTermination": True,
                    }
                ]
            },
        ),
        (
            {"security_group_id": "sg-1"},
            "us-east-1b",
            {"Placement": {"AvailabilityZone": "us-east-1b"}, "SecurityGroupIds": ["sg-1"]},
        ),
    ],
)
def test_optional_fields(
    kw: dict[str, Any], option_zone: str | None, expected: dict[str, Any]
) -> None:
    cfg = config(**kw)
    option = LaunchOption("p3.8xlarge", option_zone, Market.ON_DEMAND, 4)
    request = build(cfg, option)
    for key, value in expected.items():
        assert request[key] == value
    if "NetworkInterfaces" in expected:
        assert "SubnetId" not in request and "SecurityGroupIds" not in request


@pytest.mark.parametrize(
    ("price", "spot_options"),
    [
        (None, {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}),
        (
            "1.25",
            {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
                "MaxPrice": "1.25",
            },
        ),
    ],
)
def test_spot_market_options(price: str | None, spot_options: dict[str, str]) -> None:
    cfg = config(spot=True, spot_max_price=price)
    request = build(cfg)
    assert request["InstanceMarketOptions"] == {"MarketType": "spot", "SpotOptions": spot_options}
    assert tags_of(request)["det-market"] == "spot"
    assert tags_of(request, "spot-instances-request")["det-pool"] == "gpu"


def test_fallback_option_sets_type_subnet_and_market() -> None:
    cfg = config(
        spot=True,
        subnet_id="subnet-a",
        fallback=[{"instance_type": "g5.12xlarge", "subnet_id": "subnet-b", "spot": False}],
    )
    request = build(cfg, cfg.launch_options()[1])
    assert request["InstanceType"] == "g5.12xlarge"
    assert request["NetworkInterfaces"][0]["SubnetId"] == "subnet-b"
    assert "InstanceMarketOptions" not in request


def test_count_must_be_positive() -> None:
    with pytest.raises(ValueError):
        build(config(), count=0)


def test_describe_filters_select_cluster_pool_and_live_states() -> None:
    filters = {f["Name"]: f["Values"] for f in describe_filters("c-1", "gpu")}
    assert filters == {
        "tag:det-cluster-id": ["c-1"],
        "tag:det-pool": ["gpu"],
        "tag:managed-by": ["det"],
        "instance-state-name": ["pending", "running", "stopping", "stopped", "shutting-down"],
    }


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("pending", InstanceState.STARTING),
        ("running", InstanceState.RUNNING),
        ("stopping", InstanceState.STOPPING),
        ("stopped", InstanceState.STOPPED),
        ("shutting-down", InstanceState.TERMINATING),
        ("terminated", InstanceState.TERMINATED),
    ],
)
def test_instance_state_mapping(state: str, expected: InstanceState) -> None:
    launched = dt.datetime(2026, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    inst = instance_from_description(
        {
            "InstanceId": "i-1",
            "State": {"Name": state},
            "LaunchTime": launched,
            "InstanceType": "p3.8xlarge",
            "SubnetId": "subnet-a",
            "InstanceLifecycle": "spot",
            "PrivateIpAddress": "10.0.0.5",
        }
    )
    assert inst.state is expected
    assert inst.launched_at == launched and inst.launched_at.tzinfo == dt.UTC
    assert (inst.zone, inst.market, inst.address) == ("subnet-a", Market.SPOT, "10.0.0.5")


# --- retries and error mapping (a fake of the EC2 client interface) -----------------------------


def client_error(code: str, op: str = "RunInstances", status: int = 400) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": f"{code} happened"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        op,
    )


class ScriptedClient:
    """Answers each call with the next scripted outcome (an exception or a response)."""

    def __init__(self, *outcomes: Any) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def _next(self, name: str, kwargs: dict[str, Any]) -> Any:
        self.calls.append((name, kwargs))
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def describe_images(self, **kw: Any) -> Any:
        return {"Images": [{"RootDeviceName": "/dev/xvda"}]}

    def run_instances(self, **kw: Any) -> Any:
        return self._next("run_instances", kw)

    def terminate_instances(self, **kw: Any) -> Any:
        return self._next("terminate_instances", kw)

    def describe_spot_instance_requests(self, **kw: Any) -> Any:
        return {"SpotInstanceRequests": []}


def provider(client: ScriptedClient, sleeps: list[float]) -> AwsProvider:
    return AwsProvider(
        config(), cluster_id="c-1", pool="gpu", user_data="x", client=client, sleep=sleeps.append
    )


RUNNING = {
    "Instances": [{"InstanceId": "i-1", "State": {"Name": "pending"}, "InstanceType": "p3.8xlarge"}]
}


@pytest.mark.parametrize("code", sorted(aws.TRANSIENT_CODES))
def test_transient_errors_are_retried_with_backoff(code: str) -> None:
    client = ScriptedClient(client_error(code, status=503), client_error(code, status=503), RUNNING)
    sleeps: list[float] = []
    [inst] = provider(client, sleeps).launch(config().launch_options()[0], 1)
    assert inst.id == "i-1"
    assert sleeps == [0.5, 1.0]
    tokens = {kw["ClientToken"] for _, kw in client.calls}
    assert len(tokens) == 1  # the same token on every retry: no double launch


def test_connection_errors_are_retried() -> None:
    client = ScriptedClient(EndpointConnectionError(endpoint_url="http://x"), RUNNING)
    sleeps: list[float] = []
    assert len(provider(client, sleeps).launch(config().launch_options()[0], 1)) == 1
    assert sleeps == [0.5]


def test_retries_give_up_after_max_attempts() -> None:
    client = ScriptedClient(*[client_error("RequestLimitExceeded")] * 5)
    sleeps: list[float] = []
    with pytest.raises(LaunchError) as info:
        provider(client, sleeps).launch(config().launch_options()[0], 1)
    assert info.value.code == "RequestLimitExceeded" and not info.value.capacity
    assert len(client.calls) == 5 and len(sleeps) == 4


@pytest.mark.parametrize("code", sorted(aws.CAPACITY_CODES))
def test_capacity_errors_are_not_retried_and_marked(code: str) -> None:
    client = ScriptedClient(client_error(code, status=500))
    sleeps: list[float] = []
    with pytest.raises(LaunchError) as info:
        provider(client, sleeps).launch(config().launch_options()[0], 1)
    assert (info.value.code, info.value.capacity) == (code, True)
    assert info.value.quota == (code in QUOTA_CODES)
    if info.value.quota:
        # Quota, not capacity: where it applies and where to ask (EC2's message says neither).
        assert info.value.message.startswith(f"{code} happened. This is the account's EC2 quota")
        region = config().region
        assert (f"quota in {region}," if region else "quota, not capacity") in info.value.message
        assert aws.SERVICE_QUOTAS_EC2 in info.value.message
    else:
        assert info.value.message == f"{code} happened"
    assert len(client.calls) == 1 and sleeps == []


@pytest.mark.parametrize(
    "code", ["InvalidAMIID.NotFound", "UnauthorizedOperation", "InvalidParameterValue"]
)
def test_other_errors_surface_at_once_without_capacity(code: str) -> None:
    client = ScriptedClient(client_error(code))
    with pytest.raises(LaunchError) as info:
        provider(client, []).launch(config().launch_options()[0], 1)
    assert (info.value.code, info.value.capacity) == (code, False)
    assert len(client.calls) == 1


def test_root_device_comes_from_the_image() -> None:
    client = ScriptedClient(RUNNING)
    provider(client, []).launch(config().launch_options()[0], 1)
    assert client.calls[0][1]["BlockDeviceMappings"][0]["DeviceName"] == "/dev/xvda"


class DlamiClient(ScriptedClient):
    """An image whose root snapshot is larger than the pool's root_volume_size (a Deep
    Learning AMI's is; EC2 refuses a smaller volume with InvalidBlockDeviceMapping)."""

    def describe_images(self, **kw: Any) -> Any:
        mappings = [
            {"DeviceName": "/dev/sda1", "Ebs": {"SnapshotId": "snap-1", "VolumeSize": 75}},
            {"DeviceName": "/dev/sdb", "VirtualName": "ephemeral0"},
        ]
        return {"Images": [{"RootDeviceName": "/dev/sda1", "BlockDeviceMappings": mappings}]}


@pytest.mark.parametrize(("configured", "expected"), [(50, 75), (75, 75), (200, 200)])
def test_root_volume_is_never_smaller_than_the_images_snapshot(
    configured: int, expected: int
) -> None:
    client = DlamiClient(RUNNING)
    p = AwsProvider(
        config(root_volume_size=configured), cluster_id="c-1", pool="gpu", user_data="x",
        client=client, sleep=lambda s: None,
    )  # fmt: skip
    p.launch(p.config.launch_options()[0], 1)
    (ebs,) = [m["Ebs"] for m in client.calls[0][1]["BlockDeviceMappings"]]
    assert ebs["VolumeSize"] == expected


def test_containers_on_agents_reach_imds_and_spot_ends_in_termination() -> None:
    # Task containers on a bridge network (one more hop) read the instance role from IMDSv2 for
    # S3 checkpoints, as host-network ones do: a hop limit of 1 would drop the token's answer.
    # The user data they can read holds a spent enrollment ticket. A one-time spot request
    # only allows "terminate" as its interruption behaviour.
    request = build(config(spot=True))
    assert request["MetadataOptions"]["HttpTokens"] == "required"
    assert request["MetadataOptions"]["HttpPutResponseHopLimit"] == 2
    spot = request["InstanceMarketOptions"]["SpotOptions"]
    assert (spot["SpotInstanceType"], spot["InstanceInterruptionBehavior"]) == (
        "one-time",
        "terminate",
    )


def test_terminate_skips_unknown_ids_one_by_one() -> None:
    client = ScriptedClient(
        client_error("InvalidInstanceID.NotFound", "TerminateInstances"),
        {},  # i-1
        client_error("InvalidInstanceID.NotFound", "TerminateInstances"),  # i-2
    )
    provider(client, []).terminate(["i-2", "i-1", "i-1"])
    assert [kw["InstanceIds"] for _, kw in client.calls] == [["i-1", "i-2"], ["i-1"], ["i-2"]]


def test_terminate_raises_other_errors() -> None:
    client = ScriptedClient(client_error("UnauthorizedOperation", "TerminateInstances"))
    with pytest.raises(ClientError):
        provider(client, []).terminate(["i-1"])


def test_terminate_nothing_makes_no_call() -> None:
    client = ScriptedClient()
    provider(client, []).terminate([])
    assert client.calls == []
