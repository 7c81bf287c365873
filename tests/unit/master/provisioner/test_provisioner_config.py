"""The pool provider config: Determined's keys parse, bad values name the field."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from det.master.provisioner import instance_types
from det.master.provisioner.config import (
    AwsProviderConfig,
    ProviderConfigError,
    parse_duration,
    parse_provider_config,
)
from det.master.provisioner.provider import LaunchOption, Market


def aws(**kw: Any) -> dict[str, Any]:
    return {"type": "aws", "image_id": "ami-12c6146b", **kw}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("5m", 300),
        ("1h", 3600),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("500ms", 0.5),
        ("0", 0),
        (90, 90),
    ],
)
def test_parses_go_durations(text: Any, seconds: float) -> None:
    assert parse_duration(text) == dt.timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["5 minutes", "m5", "", "1d", "-5m"])
def test_rejects_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_determined_master_yaml_block_parses() -> None:
    # The shape `det deploy aws` writes into master.yaml for a compute pool.
    block = {
        "type": "aws",
        "region": "us-west-2",
        "iam_instance_profile_arn": "arn:aws:iam::123:instance-profile/agent",
        "image_id": "ami-0123",
        "agent_docker_image": "determinedai/determined-agent:0.38.1",
        "instance_name": "determined-agent-stack",
        "master_url": "http://local-ipv4:8080",
        "max_idle_agent_period": "10m",
        "max_agent_starting_period": "20m",
        "min_instances": 0,
        "max_instances": 5,
        "spot": True,
        "spot_max_price": "2.50",
        "network_interface": {
            "public_ip": True,
            "security_group_id": "sg-1",
            "subnet_id": "subnet-1",
        },
        "root_volume_size": 200,
        "ssh_key_name": "key",
        "tag_key": "det-stack",
        "tag_value": "det-agent-stack",
        "instance_type": "p3.8xlarge",
        "cpu_slots_allowed": True,
        "custom_tags": [{"key": "team", "value": "ml"}],
        "startup_script": "echo hi",
        "launch_error_timeout": "2m",
        "launch_error_retries": 1,
    }
    config = parse_provider_config(block)
    assert isinstance(config, AwsProviderConfig)
    assert config.max_idle_agent_period == dt.timedelta(minutes=10)
    assert config.effective_subnet_id == "subnet-1"
    assert config.effective_security_group_id == "sg-1"
    assert config.launch_options() == [LaunchOption("p3.8xlarge", "subnet-1", Market.SPOT, 4)]
    policy = config.scale_policy()
    assert policy.max_instances == 5
    assert policy.launch_error_timeout == dt.timedelta(minutes=2)
    assert policy.launch_error_retries == 1


def test_defaults_follow_determined() -> None:
    config = parse_provider_config(aws())
    assert isinstance(config, AwsProviderConfig)
    assert config.instance_type == "g4dn.metal"
    assert config.max_instances == 5 and config.min_instances == 0
    assert config.max_idle_agent_period == dt.timedelta(minutes=20)
    assert config.max_agent_starting_period == dt.timedelta(minutes=20)
    assert config.root_volume_size == 200
    assert config.launch_options()[0].slots == 8


def test_fallback_entries_inherit_unset_keys_in_order() -> None:
    config = parse_provider_config(
        aws(
            instance_type="p3.8xlarge",
            subnet_id="subnet-a",
            spot=True,
            fallback=[
                {"subnet_id": "subnet-b"},
                {"instance_type": "g5.12xlarge"},
                {"spot": False},
                {"instance_type": "custom.big", "instance_slots": 2, "spot": False},
            ],
        )
    )
    assert config.launch_options() == [
        LaunchOption("p3.8xlarge", "subnet-a", Market.SPOT, 4),
        LaunchOption("p3.8xlarge", "subnet-b", Market.SPOT, 4),
        LaunchOption("g5.12xlarge", "subnet-a", Market.SPOT, 4),
        LaunchOption("p3.8xlarge", "subnet-a", Market.ON_DEMAND, 4),
        LaunchOption("custom.big", "subnet-a", Market.ON_DEMAND, 2),
    ]


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"type": "aws"}, "provider.image_id: Field required"),
        (
            aws(max_instances=-1),
            "provider.max_instances: Input should be greater than or equal to 0",
        ),
        (
            aws(min_instances=3, max_instances=2),
            "provider.max_instances: must be greater than or equal to min_instances",
        ),
        (aws(bogus=1), "provider.bogus: Extra inputs are not permitted"),
        (
            aws(max_idle_agent_period="ten minutes"),
            "provider.max_idle_agent_period: invalid duration",
        ),
        (
            aws(max_agent_starting_period="0s"),
            "provider.max_agent_starting_period: must be greater than 0",
        ),
        (aws(instance_type="zz.big"), "provider.instance_type: unknown instance type 'zz.big'"),
        (
            aws(fallback=[{"instance_type": "zz.big"}]),
            "provider.fallback.0.instance_type: unknown instance type",
        ),
        (aws(fallback=[{"zone": "x"}]), "provider.fallback.0.zone: Extra inputs are not permitted"),
        (aws(spot_max_price="cheap"), "provider.spot_max_price: spot max price must be a number"),
        (aws(master_url="ftp://m:1"), "provider.master_url: invalid master url"),
        (
            aws(subnet_id="subnet-a", network_interface={"subnet_id": "subnet-b"}),
            "provider.subnet_id: disagrees",
        ),
        (aws(network_interface={"bogus": 1}), "provider.network_interface.bogus: Extra inputs"),
        ({"image_id": "x"}, "provider.type: required (one of: aws"),
        ({"type": "azure"}, "provider.type"),
        ("aws", "provider: expected a mapping"),
    ],
)
def test_errors_name_the_field(block: Any, message: str) -> None:
    with pytest.raises(ProviderConfigError) as info:
        parse_provider_config(block)
    assert message in str(info.value)


def test_error_path_prefix_is_configurable() -> None:
    with pytest.raises(ProviderConfigError, match=r"^resource_pools\.1\.provider\.min_instances:"):
        parse_provider_config(aws(min_instances="x"), path="resource_pools.1.provider")


def test_instance_slots_overrides_the_table() -> None:
    config = parse_provider_config(aws(instance_type="p3.8xlarge", instance_slots=2))
    assert config.launch_options()[0].slots == 2


@pytest.mark.parametrize(
    ("itype", "cpu_slots_allowed", "slots"),
    [
        ("p3.2xlarge", False, 1),
        ("p3.16xlarge", False, 8),
        ("p4d.24xlarge", False, 8),
        ("p5.48xlarge", False, 8),
        ("g4dn.12xlarge", False, 4),
        ("g5.48xlarge", False, 8),
        ("c5.xlarge", False, 0),
        ("c5.xlarge", True, 1),
        ("m5.large", True, 1),
        ("p3.4xlarge", False, None),  # no such size
        ("nosuch.large", True, None),
    ],
)
def test_slot_table(itype: str, cpu_slots_allowed: bool, slots: int | None) -> None:
    assert instance_types.slots_for(itype, cpu_slots_allowed=cpu_slots_allowed) == slots


def test_scale_policy_takes_the_pools_aux_capacity() -> None:
    config = parse_provider_config(aws(max_agent_disconnected_period="90s"))
    policy = config.scale_policy(max_aux_containers_per_agent=3)
    assert policy.max_aux_per_instance == 3
    assert policy.max_agent_disconnected_period == dt.timedelta(seconds=90)
    assert config.scale_policy().max_aux_per_instance == 100


def test_the_first_wait_after_a_failed_launch_is_configurable() -> None:
    config = parse_provider_config(aws())
    assert config.scale_policy().base_backoff == dt.timedelta(seconds=10)
    config = parse_provider_config(aws(launch_error_backoff="60s"))
    assert config.scale_policy().base_backoff == dt.timedelta(seconds=60)
    with pytest.raises(ProviderConfigError, match="launch_error_backoff: must be greater than 0"):
        parse_provider_config(aws(launch_error_backoff="0s"))
