"""Pure GCE request builders and response readers (no SDK, no network)."""

from __future__ import annotations

import datetime as dt
import random
import re
from typing import Any

import pytest

from det.common import master_url
from det.master.provisioner import gcp
from det.master.provisioner.config import parse_provider_config
from det.master.provisioner.gcp_config import GcpProviderConfig
from det.master.provisioner.provider import InstanceState, LaunchOption, Market

SCRIPT = "#!/bin/bash\nexec /usr/local/bin/det-agent-bootstrap\n"


def config(**overrides: Any) -> GcpProviderConfig:
    data = {
        "type": "gcp",
        "project": "proj",
        "zone": "us-west1-b",
        "boot_disk_source_image": "projects/proj/global/images/det-agent",
        "boot_disk_type": "projects/proj/zones/us-west1-b/diskTypes/pd-ssd",
        "boot_disk_size": 120,
        **overrides,
    }
    parsed = parse_provider_config(data)
    assert isinstance(parsed, GcpProviderConfig)
    return parsed


def option(**overrides: Any) -> LaunchOption:
    return LaunchOption(**{"instance_type": "n1-standard-8", "zone": "us-west1-b", **overrides})


def build(cfg: GcpProviderConfig, opt: LaunchOption, *, zonal: bool = True) -> dict[str, Any]:
    return gcp.instance_properties(
        cfg,
        opt,
        zone=opt.zone or "us-west1-b",
        startup_script=SCRIPT,
        labels={"det-cluster-id": "c1", "det-pool": "gpu"},
        zonal_urls=zonal,
    )


def test_insert_body_has_machine_disk_metadata_and_labels() -> None:
    body = gcp.insert_body(build(config(), option()), "det-agent-abc12345")
    assert body["name"] == "det-agent-abc12345"
    assert body["machineType"] == "zones/us-west1-b/machineTypes/n1-standard-8"
    assert body["disks"] == [
        {
            "boot": True,
            "autoDelete": True,
            "initializeParams": {
                "sourceImage": "projects/proj/global/images/det-agent",
                "diskSizeGb": "120",  # int64 travels as a JSON string
                "diskType": "zones/us-west1-b/diskTypes/pd-ssd",
            },
        }
    ]
    assert body["metadata"] == {"items": [{"key": "startup-script", "value": SCRIPT}]}
    assert body["labels"] == {"det-cluster-id": "c1", "det-pool": "gpu"}
    assert "guestAccelerators" not in body and "scheduling" not in body


def test_bulk_properties_use_bare_type_names() -> None:
    props = build(config(), option(accelerator_type="nvidia-l4", accelerator_count=1), zonal=False)
    assert props["machineType"] == "n1-standard-8"
    assert props["disks"][0]["initializeParams"]["diskType"] == "pd-ssd"
    assert props["guestAccelerators"][0]["acceleratorType"] == "nvidia-l4"
    bulk = gcp.bulk_insert_body(props, ["a1", "a2"])
    assert bulk["count"] == "2" and bulk["minCount"] == "1"
    assert list(bulk["perInstanceProperties"]) == ["a1", "a2"]


@pytest.mark.parametrize(
    ("overrides", "opt", "scheduling"),
    [
        ({}, {}, None),
        (
            {},
            {"accelerator_type": "nvidia-tesla-t4", "accelerator_count": 2},
            {"onHostMaintenance": "TERMINATE"},
        ),
        (
            {"spot": True},
            {"market": Market.SPOT},
            {
                "provisioningModel": "SPOT",
                "instanceTerminationAction": "DELETE",
                "automaticRestart": False,
                "onHostMaintenance": "TERMINATE",
            },
        ),
        (
            {"preemptible": True},
            {"market": Market.SPOT},
            {"preemptible": True, "automaticRestart": False, "onHostMaintenance": "TERMINATE"},
        ),
        # A pool on standard VMs whose fallback entry asks for spot gets the Spot model.
        (
            {},
            {"market": Market.SPOT},
            {
                "provisioningModel": "SPOT",
                "instanceTerminationAction": "DELETE",
                "automaticRestart": False,
                "onHostMaintenance": "TERMINATE",
            },
        ),
        # The on-demand fallback of a preemptible pool is a standard VM.
        ({"preemptible": True}, {"market": Market.ON_DEMAND}, None),
    ],
)
def test_scheduling_for_gpus_spot_and_preemptible(
    overrides: dict[str, Any], opt: dict[str, Any], scheduling: dict[str, Any] | None
) -> None:
    body = build(config(**overrides), option(**opt))
    assert body.get("scheduling") == scheduling


def test_gpus_become_guest_accelerators_in_the_launch_zone() -> None:
    body = build(
        config(), option(zone="us-west1-a", accelerator_type="nvidia-tesla-t4", accelerator_count=4)
    )
    assert body["guestAccelerators"] == [
        {
            "acceleratorType": "zones/us-west1-a/acceleratorTypes/nvidia-tesla-t4",
            "acceleratorCount": 4,
        }
    ]
    assert body["machineType"].startswith("zones/us-west1-a/")


@pytest.mark.parametrize(
    ("interface", "expected"),
    [
        ({}, [{"network": "global/networks/default"}]),
        (
            {"network": "global/networks/det", "subnetwork": "regions/r/subnetworks/s"},
            [{"network": "global/networks/det", "subnetwork": "regions/r/subnetworks/s"}],
        ),
        (
            {"external_ip": True},
            [
                {
                    "network": "global/networks/default",
                    "accessConfigs": [
                        {"name": "External NAT", "type": "ONE_TO_ONE_NAT", "networkTier": "PREMIUM"}
                    ],
                }
            ],
        ),
    ],
)
def test_network_interface(interface: dict[str, Any], expected: list[dict[str, Any]]) -> None:
    assert build(config(network_interface=interface), option())["networkInterfaces"] == expected


def test_service_account_tags_and_base_config() -> None:
    cfg = config(
        service_account={"email": "sa@proj.iam.gserviceaccount.com"},
        network_tags=["allow-ssh"],
        base_config={
            "minCpuPlatform": "Intel Skylake",
            "labels": {"cost-center": "42"},
            "metadata": {
                "items": [{"key": "startup-script", "value": "old"}, {"key": "k", "value": "v"}]
            },
        },
    )
    body = build(cfg, option())
    assert body["serviceAccounts"] == [
        {
            "email": "sa@proj.iam.gserviceaccount.com",
            "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
        }
    ]
    assert body["tags"] == {"items": ["allow-ssh"]}
    assert body["minCpuPlatform"] == "Intel Skylake"
    assert body["labels"]["cost-center"] == "42" and body["labels"]["det-pool"] == "gpu"
    assert body["metadata"]["items"] == [
        {"key": "k", "value": "v"},
        {"key": "startup-script", "value": SCRIPT},
    ]
    assert cfg.base_config is not None and "disks" not in cfg.base_config  # not mutated


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("default", "default"),
        ("gpu-pool_2", "gpu-pool_2"),
        ("6f1e0c52-1d1e-4c1a-9d1a-0b8f3a2d9e11", "6f1e0c52-1d1e-4c1a-9d1a-0b8f3a2d9e11"),
    ],
)
def test_valid_label_values_are_kept(value: str, expected: str) -> None:
    assert gcp.sanitize_label_value(value) == expected


@pytest.mark.parametrize("value", ["Pool A", "GPU.Pool", "x" * 80, "pool/ä"])
def test_label_values_are_sanitised_and_stay_distinct(value: str) -> None:
    clean = gcp.sanitize_label_value(value)
    assert re.fullmatch(r"[a-z0-9_-]{1,63}", clean)
    assert clean != gcp.sanitize_label_value(value.lower() + "!")


def test_sanitised_values_of_different_names_differ() -> None:
    assert gcp.sanitize_label_value("Pool_A") != gcp.sanitize_label_value("pool_a")


def test_instance_labels_tag_cluster_pool_and_manager() -> None:
    cfg = config(labels={"Team": "Vision"}, label_key="owner", label_value="det-master-abc")
    labels = gcp.instance_labels(cfg, "C1", "default")
    assert labels["managed-by"] == "det"
    assert labels["owner"] == "det-master-abc"
    assert labels["det-pool"] == "default"
    assert labels["det-cluster-id"].startswith("c1-")
    assert labels["Team"].startswith("vision-")
    assert gcp.label_filter("C1", "default") == (
        f"(labels.det-cluster-id = {labels['det-cluster-id']}) AND (labels.det-pool = default)"
    )


def test_instance_names_are_valid_gce_names_and_seeded() -> None:
    names = [gcp.instance_name("det-agent-", random.Random(7)) for _ in range(2)]
    assert names[0] == names[1]
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", names[0]) and len(names[0]) <= 63
    rng = random.Random(7)
    assert len({gcp.instance_name("p-", rng) for _ in range(100)}) == 100


@pytest.mark.parametrize(
    ("status", "state"),
    [
        ("PROVISIONING", InstanceState.STARTING),
        ("STAGING", InstanceState.STARTING),
        ("RUNNING", InstanceState.RUNNING),
        ("STOPPING", InstanceState.STOPPING),
        ("SUSPENDED", InstanceState.STOPPED),
        ("TERMINATED", InstanceState.STOPPED),
    ],
)
def test_instance_from_rest_maps_status(status: str, state: InstanceState) -> None:
    inst = gcp.instance_from_rest(
        {
            "name": "det-agent-x",
            "status": status,
            "creationTimestamp": "2026-01-02T03:04:05.000-08:00",
            "machineType": "https://www.googleapis.com/compute/v1/projects/p/zones/z1/machineTypes/n1-standard-8",
            "zone": "https://www.googleapis.com/compute/v1/projects/p/zones/z1",
            "scheduling": {"provisioningModel": "SPOT"},
            "networkInterfaces": [{"networkIP": "10.1.2.3"}],
        }
    )
    assert inst.state is state
    assert (inst.id, inst.instance_type, inst.zone, inst.address) == (
        "det-agent-x",
        "n1-standard-8",
        "z1",
        "10.1.2.3",
    )
    assert inst.market is Market.SPOT
    assert inst.launched_at == dt.datetime(2026, 1, 2, 11, 4, 5, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("errors", "code", "capacity"),
    [
        ([("ZONE_RESOURCE_POOL_EXHAUSTED", "no room")], "ZONE_RESOURCE_POOL_EXHAUSTED", True),
        (
            [("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "x")],
            "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
            True,
        ),
        ([("QUOTA_EXCEEDED", "Quota 'NVIDIA_T4_GPUS' exceeded")], "QUOTA_EXCEEDED", True),
        (
            [
                (
                    "RESOURCE_NOT_FOUND",
                    "The resource 'projects/p/zones/z/machineTypes/a2-x' was not found",
                )
            ],
            "RESOURCE_NOT_FOUND",
            True,
        ),
        (
            [("RESOURCE_NOT_FOUND", "The resource 'projects/p/global/images/x' was not found")],
            "RESOURCE_NOT_FOUND",
            False,
        ),
        ([("PERMISSIONS_ERROR", "denied")], "PERMISSIONS_ERROR", False),
        ([("INVALID_FIELD", "x"), ("QUOTA_EXCEEDED", "y")], "QUOTA_EXCEEDED", True),
        ([], "UNKNOWN", False),
    ],
)
def test_operation_errors_are_classified(
    errors: list[tuple[str, str]], code: str, capacity: bool
) -> None:
    err = gcp.launch_error(errors)
    assert (err.code, err.capacity) == (code, capacity)


def test_quota_refusals_are_told_from_capacity_and_say_where_to_ask() -> None:
    message = "Quota 'CPUS' exceeded.  Limit: 24.0 in region us-west1."
    err = gcp.with_quota_hint(gcp.launch_error([("QUOTA_EXCEEDED", message)]), "p-1")
    assert err.capacity and err.quota and err.code == "QUOTA_EXCEEDED"
    assert "Quota 'CPUS' exceeded" in err.message and "in region us-west1" in err.message
    assert "iam-admin/quotas?project=p-1" in err.message and "not capacity" in err.message
    capacity = gcp.launch_error([("ZONE_RESOURCE_POOL_EXHAUSTED", "no n1 in us-west1-b")])
    assert capacity.capacity and not capacity.quota
    assert gcp.with_quota_hint(capacity, "p-1") is capacity


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://internal-ip:8080", "http://10.0.0.5:8080"),
        ("https://external-ip", "https://203.0.113.9:8080"),
        ("internal-ip:9000", "http://10.0.0.5:9000"),
        ("http://master.example.com:8443", "http://master.example.com:8443"),
    ],
)
def test_master_url_placeholders_are_read_from_metadata(url: str, expected: str) -> None:
    answers = {
        "instance/network-interfaces/0/ip": "10.0.0.5",
        "instance/network-interfaces/0/access-configs/0/external-ip": "203.0.113.9",
    }
    assert master_url.resolve(url, gcp.GCE_ADDRESS_PLACEHOLDERS, answers.__getitem__) == expected
