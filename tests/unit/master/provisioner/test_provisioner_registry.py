"""The provisioner registry: every cloud with a config model has a provider factory, and a
pool's parsed config builds that cloud's provider."""

from __future__ import annotations

from typing import Any, get_args

import pytest

from det.master.provisioner import registry
from det.master.provisioner.aws import AwsProvider
from det.master.provisioner.config import CONFIG_TYPES, parse_provider_config
from det.master.provisioner.gcp import GcpProvider

COMMON: dict[str, Any] = {
    "cluster_id": "c-1",
    "pool": "gpu",
    "master_url": "http://10.0.0.2:8080",
    "agent_token": "tok",
    "extra_env": {},
}


def test_every_config_type_has_a_factory() -> None:
    types = {arg for t in CONFIG_TYPES for arg in get_args(t.model_fields["type"].annotation)}
    assert types == set(registry.FACTORIES)


def test_a_config_builds_its_clouds_provider() -> None:
    aws = parse_provider_config(
        {"type": "aws", "image_id": "ami-12c6146b", "instance_type": "p3.8xlarge"}
    )
    assert isinstance(registry.build(aws, dict(COMMON)), AwsProvider)
    gcp = parse_provider_config(
        {
            "type": "gcp",
            "project": "p",
            "zone": "us-central1-a",
            "boot_disk_source_image": "projects/p/global/images/det",
            "instance_type": {"machine_type": "n1-standard-4"},
            "endpoint_url": "http://127.0.0.1:1/compute/v1",
        }
    )
    provider = registry.build(gcp, dict(COMMON))
    assert isinstance(provider, GcpProvider)


def test_a_type_without_a_factory_is_refused_by_name() -> None:
    aws = parse_provider_config(
        {"type": "aws", "image_id": "ami-12c6146b", "instance_type": "p3.8xlarge"}
    )
    odd = aws.model_copy(update={"type": "azure"})
    with pytest.raises(ValueError, match="no provider for 'azure'"):
        registry.build(odd, dict(COMMON))
