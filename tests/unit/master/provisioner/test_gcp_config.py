"""The ``provider: {type: gcp}`` block: Determined's keys, our additions, readable errors."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from det.master.provisioner.config import ProviderConfigError, parse_provider_config
from det.master.provisioner.gcp_config import GcpProviderConfig
from det.master.provisioner.provider import LaunchOption, Market

# The shape Determined's own GCP deployment writes into master.yaml.
DETERMINED_BLOCK: dict[str, Any] = {
    "type": "gcp",
    "instance_type": {
        "machine_type": "n1-standard-8",
        "gpu_type": "nvidia-tesla-t4",
        "gpu_num": 2,
        "preemptible": False,
    },
    "boot_disk_size": 200,
    "boot_disk_source_image": "projects/my-project/global/images/det-agent-1",
    "boot_disk_type": "projects/my-project/zones/us-west1-b/diskTypes/pd-ssd",
    "agent_docker_image": "determinedai/determined-agent:0.38.1",
    "master_url": "http://internal-ip:8080",
    "agent_docker_network": "det",
    "max_idle_agent_period": "10m",
    "max_agent_starting_period": "20m",
    "name_prefix": "det-dynamic-agent-abc-",
    "labels": {"team": "vision"},
    "label_key": "managed-by",
    "label_value": "det-master-abc",
    "network_interface": {
        "network": "projects/my-project/global/networks/det",
        "subnetwork": "projects/my-project/regions/us-west1/subnetworks/det",
        "external_ip": True,
    },
    "network_tags": ["allow-internal", "allow-ssh"],
    "service_account": {
        "email": "agent@my-project.iam.gserviceaccount.com",
        "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
    },
    "min_instances": 0,
    "max_instances": 8,
    "operation_timeout_period": "5m",
    "base_config": {"minCpuPlatform": "Intel Skylake"},
    "use_cloud_logging": True,
}


def parse(**overrides: Any) -> GcpProviderConfig:
    config = parse_provider_config({**DETERMINED_BLOCK, **overrides})
    assert isinstance(config, GcpProviderConfig)
    return config


def test_determined_master_yaml_block_parses() -> None:
    config = parse()
    assert config.instance_type.machine_type == "n1-standard-8"
    assert config.instance_type.gpu_num == 2
    assert config.max_idle_agent_period == dt.timedelta(minutes=10)
    assert config.operation_timeout_period == dt.timedelta(minutes=5)
    assert config.network_interface.external_ip is True
    assert config.service_account is not None
    assert config.service_account.email.startswith("agent@")
    assert config.project is None and config.zone is None  # the master's own, at run time


def test_defaults_follow_determined() -> None:
    config = parse_provider_config({"type": "gcp", "boot_disk_source_image": "img"})
    assert isinstance(config, GcpProviderConfig)
    assert config.boot_disk_size == 200
    assert config.label_key == "managed-by"
    assert (config.instance_type.machine_type, config.instance_type.gpu_num) == (
        "n1-standard-32",
        4,
    )
    assert config.max_instances == 5


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"instance_type": {"machine_type": "n1-standard-8", "gpus": 1}},
            "provider.instance_type.gpus",
        ),
        ({"boot_disk_size": 5}, "provider.boot_disk_size"),
        ({"name_prefix": "Det_"}, "provider.name_prefix: must start with a lowercase letter"),
        ({"spot": True, "preemptible": True}, "provider.spot: cannot be combined with preemptible"),
        ({"min_instances": 4, "max_instances": 2}, "provider.max_instances"),
        ({"fallback": [{"zone": "us-west1-a", "market": "spot"}]}, "provider.fallback.0.market"),
        ({"service_account": {"scopes": []}}, "provider.service_account.email"),
    ],
)
def test_bad_values_name_the_field(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ProviderConfigError, match=message.replace(".", r"\.")):
        parse(**overrides)


def test_boot_disk_image_is_required() -> None:
    with pytest.raises(
        ProviderConfigError, match=r"provider\.boot_disk_source_image: Field required"
    ):
        parse_provider_config({"type": "gcp"})


def test_launch_options_without_fallback_is_the_pool_option() -> None:
    config = parse(zone="us-west1-b")
    assert config.launch_options() == [
        LaunchOption(
            instance_type="n1-standard-8",
            zone="us-west1-b",
            market=Market.ON_DEMAND,
            slots=2,
            accelerator_type="nvidia-tesla-t4",
            accelerator_count=2,
        )
    ]


def test_fallback_entries_inherit_unset_keys_in_order() -> None:
    smaller = {"machine_type": "n1-standard-4", "gpu_type": "nvidia-tesla-t4", "gpu_num": 1}
    config = parse(
        zone="us-west1-b",
        spot=True,
        fallback=[{"zone": "us-west1-a"}, {"instance_type": smaller}, {"spot": False}],
    )
    got = [(o.instance_type, o.zone, o.market, o.slots) for o in config.launch_options()]
    assert got == [
        ("n1-standard-8", "us-west1-b", Market.SPOT, 2),
        ("n1-standard-8", "us-west1-a", Market.SPOT, 2),
        ("n1-standard-4", "us-west1-b", Market.SPOT, 1),
        ("n1-standard-8", "us-west1-b", Market.ON_DEMAND, 2),
    ]


def test_determined_preemptible_flag_makes_options_interruptible() -> None:
    config = parse(instance_type={**DETERMINED_BLOCK["instance_type"], "preemptible": True})
    assert config.wants_preemptible and not config.spot
    assert config.launch_options()[0].market is Market.SPOT


@pytest.mark.parametrize(
    ("gpu_type", "gpu_num", "cpu_slots_allowed", "slots", "accelerator"),
    [
        ("nvidia-tesla-t4", 4, False, 4, ("nvidia-tesla-t4", 4)),
        ("nvidia-tesla-t4", 0, False, 0, (None, 0)),
        ("", 2, False, 0, (None, 0)),
        ("", 0, True, 1, (None, 0)),
    ],
)
def test_slots_come_from_gpus_or_cpu_slots_allowed(
    gpu_type: str,
    gpu_num: int,
    cpu_slots_allowed: bool,
    slots: int,
    accelerator: tuple[str | None, int],
) -> None:
    config = parse(
        instance_type={"machine_type": "n1-standard-8", "gpu_type": gpu_type, "gpu_num": gpu_num},
        cpu_slots_allowed=cpu_slots_allowed,
    )
    option = config.launch_options()[0]
    assert option.slots == slots
    assert (option.accelerator_type, option.accelerator_count) == accelerator


def test_scale_policy_carries_the_fallback_list() -> None:
    config = parse(zone="z1", fallback=[{"zone": "z2"}])
    policy = config.scale_policy()
    assert [o.zone for o in policy.options] == ["z1", "z2"]
    assert policy.max_instances == 8
