"""What a task container policy may say (det.master.container_policy.ContainerPolicy): one model
for master.yaml's ``task_container_policy`` (and a pool's) and for the value an admin stores at
run time (``PUT /api/v1/master/task-container-policy``), each refusal naming the key."""

from __future__ import annotations

import re
from typing import Any

import pytest

from det.master.config import MasterConfigError, parse_config
from det.master.container_policy import ContainerPolicy
from det.master.errors import InvalidArgument
from det.master.schemas import validate

BAD: list[tuple[dict[str, Any], str, str]] = [  # the policy, master.yaml's key, the reason
    (
        {"bind_mounts": [{"host_path": "data"}]},
        "bind_mounts.0.host_path",
        "must be an absolute host path (got 'data')",
    ),
    (
        {"devices": ["/dev/fuse", "fuse"]},
        "devices.1",
        "'fuse' is neither an absolute host path nor a rule",
    ),
    (
        {"add_capabilities": ["SYS_PTRACE", "sys admin"]},
        "add_capabilities.1",
        "'sys admin' is not a capability's name",
    ),
    (
        {"protected_host_paths": ["srv"]},
        "protected_host_paths.0",
        "must be an absolute host path (got 'srv')",
    ),
    (
        {"bind_mounts": [{"host_path": "/srv\x00"}]},
        "bind_mounts.0.host_path",
        "a path holds no NUL",
    ),
]


@pytest.mark.parametrize(("policy", "key", "why"), BAD)
def test_master_yaml_refuses_a_bad_policy_naming_the_key(
    policy: dict[str, Any], key: str, why: str
) -> None:
    with pytest.raises(MasterConfigError, match=re.escape(f"task_container_policy.{key}: {why}")):
        parse_config({"task_container_policy": policy})
    pool = {"pool_name": "p", "task_container_policy": policy}
    with pytest.raises(MasterConfigError, match=f"resource_pools.0.task_container_policy.{key}"):
        parse_config({"resource_pools": [pool]})


@pytest.mark.parametrize(("policy", "key", "why"), BAD)
def test_the_api_refuses_the_same_policy_naming_the_key(
    policy: dict[str, Any], key: str, why: str
) -> None:
    wire_key = re.sub(r"\.([0-9]+)", r"[\1]", key)  # the API's spelling: bind_mounts[0]
    with pytest.raises(InvalidArgument) as e:
        validate(ContainerPolicy, policy, "policy")
    assert str(e.value.message).startswith(f"policy.{wire_key}: {why}"), e.value.message


def test_what_a_policy_may_say() -> None:
    ok = ContainerPolicy.model_validate(
        {
            "bind_mounts": [{"host_path": "/srv/data", "read_only": True}],
            "add_capabilities": ["SYS_PTRACE", "cap_ipc_lock"],
            "devices": ["/dev/fuse", "c 10:229", "b 7:*"],
            "protected_host_paths": ["/srv/secret"],
        }
    )
    assert ok.devices == ["/dev/fuse", "c 10:229", "b 7:*"]
    assert ContainerPolicy.model_validate({}) == ContainerPolicy()
