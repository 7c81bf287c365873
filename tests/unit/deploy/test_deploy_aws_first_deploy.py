"""What a first real `det deploy aws up` needs, checked on the graph (Pulumi mocks) and offline."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
import yaml
from conftest import AWS

from det.deploy.aws import checks, commands, program
from det.deploy.aws.config import (
    CONFIG_HASH_TAG,
    DLAMI_SSM_PARAMETER,
    UBUNTU_SSM_PARAMETER,
    AwsConfig,
    Images,
)
from det.deploy.common import automation, dryrun, state
from det.deploy.common.errors import DeployError

INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
PINNED = Images(
    master="ami-0aaaaaaaaaaaaaaaa",
    aux_agent="ami-0bbbbbbbbbbbbbbbb",
    compute_agent="ami-0cccccccccccccccc",
)


def _render(cfg: AwsConfig) -> dryrun.Rendered:
    return dryrun.render(lambda: program.build(cfg), program.MOCK_CALLS)


def _statements(graph: dryrun.Rendered, role_suffix: str) -> list[dict[str, Any]]:
    (policy,) = [
        r for r in graph.of_type("aws:iam/rolePolicy:RolePolicy") if r.name.endswith(role_suffix)
    ]
    statements: list[dict[str, Any]] = json.loads(policy.inputs["policy"])["Statement"]
    return statements


def _pools(graph: dryrun.Rendered) -> dict[str, dict[str, Any]]:
    config = yaml.safe_load(graph.outputs["master_yaml"])
    return {p["pool_name"]: p["provider"] for p in config["resource_pools"]}


def _world_ports(graph: dryrun.Rendered) -> set[int]:
    ports = set()
    for rule in graph.of_type(INGRESS):
        if rule.inputs.get("cidrIpv4") or rule.inputs.get("cidrIpv6"):
            assert rule.inputs["fromPort"] == rule.inputs["toPort"], rule.name
            ports.add(rule.inputs["fromPort"])
    return ports


# --- images -----------------------------------------------------------------------------------


def test_unpinned_images_come_from_the_public_ssm_parameters(aws_graph, one):
    assert aws_graph.calls.count("aws:ssm/getParameter:getParameter") == 2
    ubuntu, dlami = program.MOCK_AMIS[UBUNTU_SSM_PARAMETER], program.MOCK_AMIS[DLAMI_SSM_PARAMETER]
    assert one(aws_graph, "aws:ec2/instance:Instance")["ami"] == ubuntu
    pools = _pools(aws_graph)
    assert pools["aux-pool"]["image_id"] == ubuntu
    assert pools["compute-pool"]["image_id"] == dlami
    assert aws_graph.outputs["images"] == {
        "master": ubuntu,
        "aux_agent": ubuntu,
        "compute_agent": dlami,
    }


def test_the_parameters_name_ubuntu_24_04_and_the_gpu_base_dlami():
    assert "/canonical/ubuntu/server/24.04/" in UBUNTU_SSM_PARAMETER
    assert UBUNTU_SSM_PARAMETER.endswith("/amd64/hvm/ebs-gp3/ami-id")
    assert "base-oss-nvidia-driver-gpu-ubuntu-24.04" in DLAMI_SSM_PARAMETER


def test_pinned_images_are_used_without_any_lookup():
    graph = _render(dataclasses.replace(AWS, images=PINNED))
    assert "aws:ssm/getParameter:getParameter" not in graph.calls
    assert graph.of_type("aws:ec2/instance:Instance")[0].inputs["ami"] == PINNED.master
    pools = _pools(graph)
    assert pools["aux-pool"]["image_id"] == PINNED.aux_agent
    assert pools["compute-pool"]["image_id"] == PINNED.compute_agent
    assert graph.outputs["images"] == PINNED.as_dict()


def test_agent_image_id_replaces_both_pools_images_but_not_the_masters():
    graph = _render(dataclasses.replace(AWS, images=PINNED, agent_image_id="ami-0123abcd"))
    assert {p["image_id"] for p in _pools(graph).values()} == {"ami-0123abcd"}
    assert graph.of_type("aws:ec2/instance:Instance")[0].inputs["ami"] == PINNED.master


def test_a_later_up_keeps_the_pinned_images_unless_refreshed():
    previous = {"images": PINNED.as_dict(), "region": "us-west-2"}
    assert commands.pinned_images(previous, refresh=False) == PINNED
    assert commands.pinned_images(previous, refresh=True) is None
    assert commands.pinned_images(None, refresh=False) is None
    assert commands.pinned_images({"images": {"master": "ami-1"}}, refresh=False) is None


def test_subnets_go_into_the_chosen_zones_which_the_stack_records():
    graph = _render(dataclasses.replace(AWS, images=PINNED, zones=("us-west-2c", "us-west-2d")))
    assert "aws:index/getAvailabilityZones:getAvailabilityZones" not in graph.calls
    subnets = {r.name: r.inputs["availabilityZone"] for r in graph.of_type("aws:ec2/subnet:Subnet")}
    assert sorted(subnets.values()) == ["us-west-2c", "us-west-2c", "us-west-2d", "us-west-2d"]
    assert subnets["det-c1-public-0"] == "us-west-2c"  # the master's and the agents' subnet
    assert graph.outputs["zones"] == ["us-west-2c", "us-west-2d"]


def test_a_later_up_keeps_the_zones_and_an_older_stack_its_subnets():
    assert commands.pinned_zones(None) is None  # a new stack: preflight picks
    assert commands.pinned_zones({"zones": ["us-west-2c", "us-west-2d"]}) == (
        "us-west-2c",
        "us-west-2d",
    )
    # A stack made before zones were recorded keeps the region's first two (no replacement).
    assert commands.pinned_zones({"region": "us-west-2"}) == ()
    graph = _render(dataclasses.replace(AWS, images=PINNED))
    assert graph.outputs["zones"] == ["us-west-2a", "us-west-2b"]


# --- task images --------------------------------------------------------------------------------


def test_task_images_default_to_determineds_published_images(aws_graph):
    # Determined 0.38.1's expconf CPUImage/CUDAImage (the -dev:0736b6d tag was an earlier one).
    config = yaml.safe_load(aws_graph.outputs["master_yaml"])
    assert config["task_container_defaults"]["image"] == {
        "cpu": "determinedai/pytorch-ngc:0.38.1",
        "cuda": "determinedai/pytorch-ngc:0.38.1",
    }


def test_task_image_flags_replace_the_defaults():
    cfg = dataclasses.replace(AWS, cpu_env_image="r/cpu:1", gpu_env_image="r/gpu:1")
    config = yaml.safe_load(_render(cfg).outputs["master_yaml"])
    assert config["task_container_defaults"]["image"] == {"cpu": "r/cpu:1", "cuda": "r/gpu:1"}


def test_agents_may_pull_from_ecr_with_their_role_and_the_master_may_not(aws_graph):
    agent = {a for s in _statements(aws_graph, "-agent") for a in _as_list(s["Action"])}
    assert {"ecr:GetAuthorizationToken", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"} <= agent
    master = {a for s in _statements(aws_graph, "-master") for a in _as_list(s["Action"])}
    assert not any(a.startswith("ecr:") for a in master)
    (pull,) = [s for s in _statements(aws_graph, "-agent") if s.get("Sid") == "EcrPull"]
    assert pull["Resource"] == "arn:aws:ecr:us-west-2:*:repository/*"


def _as_list(value: Any) -> list[str]:
    return value if isinstance(value, list) else [value]


# --- spot service-linked role -------------------------------------------------------------------


def test_spot_cluster_creates_the_spot_service_linked_role_when_the_account_lacks_it(aws_graph):
    (role,) = aws_graph.of_type("aws:iam/serviceLinkedRole:ServiceLinkedRole")
    assert role.inputs["awsServiceName"] == "spot.amazonaws.com"


@pytest.mark.parametrize(
    ("spot", "missing"), [(True, False), (False, True), (False, False)], ids=str
)
def test_no_spot_service_linked_role_when_it_exists_or_without_spot(spot, missing):
    graph = _render(dataclasses.replace(AWS, spot=spot, create_spot_service_role=missing))
    assert graph.of_type("aws:iam/serviceLinkedRole:ServiceLinkedRole") == []


# --- boot logs ----------------------------------------------------------------------------------


def test_boot_log_group_has_a_retention_and_the_cluster_tags(aws_graph, one):
    group = one(aws_graph, "aws:cloudwatch/logGroup:LogGroup")
    assert group["name"] == "/det/c1" and group["retentionInDays"] == 30
    assert group["tags"]["det-cluster"] == "c1"
    assert aws_graph.outputs["log_group"] == "/det/c1"


def test_both_roles_write_logs_only_into_the_cluster_log_group(aws_graph):
    group = "arn:aws:logs:us-west-2:*:log-group:/det/c1"
    for role in ("-master", "-agent"):
        logs = [
            s
            for s in _statements(aws_graph, role)
            if any(a.startswith("logs:") for a in _as_list(s["Action"]))
        ]
        assert len(logs) == 1, role
        # Write only: the shipper never reads (test_deploy_status records its calls).
        assert set(_as_list(logs[0]["Action"])) == {"logs:CreateLogStream", "logs:PutLogEvents"}
        assert _as_list(logs[0]["Resource"]) == [group, f"{group}:*"]


# --- network ------------------------------------------------------------------------------------


def test_master_is_reachable_from_the_inbound_cidr_only_on_the_https_port():
    graph = _render(dataclasses.replace(AWS, enable_ssh=False))
    assert _world_ports(graph) == {8443, 8444}  # the API and its task origin
    assert graph.outputs["master_url"].startswith("https://")


def test_ssh_only_with_enable_ssh(aws_graph):
    assert _world_ports(aws_graph) == {8443, 8444, 22}


def test_plain_http_opens_8080_instead():
    graph = _render(dataclasses.replace(AWS, tls=False, port=8080, enable_ssh=False))
    assert _world_ports(graph) == {8080, 8081}
    assert graph.outputs["master_url"] == "http://203.0.113.10:8080"


def test_agents_reach_the_master_port_by_security_group_not_by_address(aws_graph):
    (rule,) = [r.inputs for r in aws_graph.of_type(INGRESS) if r.name.endswith("agent-to-master")]
    assert rule["referencedSecurityGroupId"] == "det-c1-agent-id" and "cidrIpv4" not in rule
    assert rule["fromPort"] == rule["toPort"] == 8443


# --- database -----------------------------------------------------------------------------------


def test_database_keeps_a_uniquely_named_final_snapshot(aws_graph, one):
    db = one(aws_graph, "aws:rds/instance:Instance")
    assert db["skipFinalSnapshot"] is False
    assert db["finalSnapshotIdentifier"].startswith("det-c1-final-")
    assert len(db["finalSnapshotIdentifier"]) > len("det-c1-final-")
    assert aws_graph.outputs["db_final_snapshot"] == db["finalSnapshotIdentifier"]


# --- agents replaced on a master change --------------------------------------------------------


def test_agents_carry_a_hash_of_the_master_config_that_changes_with_it(aws_graph):
    tags = [{t["key"]: t["value"] for t in p["custom_tags"]} for p in _pools(aws_graph).values()]
    digest = aws_graph.outputs["config_hash"]
    assert [t[CONFIG_HASH_TAG] for t in tags] == [digest, digest]
    assert _render(AWS).outputs["config_hash"] == digest
    changed = _render(dataclasses.replace(AWS, max_idle_agent_period="30m"))
    assert changed.outputs["config_hash"] != digest


# --- region of an existing stack ----------------------------------------------------------------


def test_up_refuses_a_region_other_than_the_stacks():
    with pytest.raises(DeployError, match=r"deployed in us-west-2, not eu-west-1") as e:
        commands.stack_region("eu-west-1", {"region": "us-west-2"})
    assert "\n" not in str(e.value)


def test_up_without_region_takes_the_stacks():
    assert commands.stack_region(None, {"region": "eu-west-1"}) == "eu-west-1"
    assert commands.stack_region("eu-west-1", {"region": "eu-west-1"}) == "eu-west-1"
    assert commands.stack_region("eu-west-1", None) == "eu-west-1"
    assert commands.stack_region(None, None) is None


# --- remote state -------------------------------------------------------------------------------


def test_state_url_from_the_environment_reaches_the_pulumi_project(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.setenv(state.STATE_URL_ENV, "s3://det-state/team-a")
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "shared")
    opts = automation._workspace_options("det-aws", str(tmp_path))
    assert opts.project_settings.backend.url == "s3://det-state/team-a"
    assert opts.env_vars["PULUMI_BACKEND_URL"] == "s3://det-state/team-a"
    assert opts.env_vars["PULUMI_CONFIG_PASSPHRASE"] == "shared"
    # The shared passphrase is used: no per-machine passphrase file is made.
    assert not (state.state_dir() / "passphrase").exists()


def test_state_url_flag_overrides_the_environment(monkeypatch, tmp_path):
    import argparse

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.setenv(state.STATE_URL_ENV, "s3://old/x")
    commands.use_state_url(argparse.Namespace(state_url="s3://new/y"))
    assert state.backend_url(state.state_dir()) == "s3://new/y"
    assert not state.is_local(state.backend_url(state.state_dir()), state.state_dir())


def test_local_state_is_the_default(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.delenv(state.STATE_URL_ENV, raising=False)
    directory = state.state_dir()
    assert state.is_local(state.backend_url(directory), directory)


@pytest.mark.parametrize("url", ["ftp://x/y", "bucket/prefix", "s3://"])
def test_bad_state_url_is_one_line(url):
    with pytest.raises(DeployError, match=r"^--state-url .*expected s3://") as e:
        state.check_state_url(url)
    assert "\n" not in str(e.value)


# --- flags checked offline ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("region", "mars-central-9", r"--region 'mars-central-9' is not an AWS region"),
        ("region", "us-wset-2", r"did you mean us-west-2"),
        (
            "compute_agent_instance_type",
            "g4dn.xlarg",
            r"--compute-agent-instance-type 'g4dn.xlarg' .*did you mean g4dn.xlarge",
        ),
        ("master_instance_type", "zz9.large", r"unknown instance family 'zz'"),
        ("aux_agent_instance_type", "m5", r"expected <family><generation>.<size>"),
        ("db_instance_type", "m7g.large", r"--db-instance-type 'm7g.large' .*db\.<type>"),
        ("inbound_cidr", "10.0.0.0/33", r"--inbound-cidr '10.0.0.0/33' is not a CIDR block"),
        ("inbound_cidr", "10.0.0.1/24", r"is not a CIDR block"),
        ("agent_image_id", "ubuntu-24.04", r"--agent-image-id 'ubuntu-24.04' is not an AMI id"),
    ],
)
def test_bad_flags_are_refused_offline_with_one_line(field, value, message):
    cfg = dataclasses.replace(AWS, **{field: value})
    with pytest.raises(DeployError, match=message) as e:
        cfg.validate()
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "instance_type",
    ["g4dn.metal", "p4d.24xlarge", "m7i-flex.large", "u-6tb1.metal", "mac2-m2pro.metal",
     "i7ie.metal-48xl", "vt1.3xlarge", "g6e.xlarge", "c7gn.medium"],
)  # fmt: skip
def test_real_instance_types_are_accepted(instance_type):
    checks.check_instance_type("--x", instance_type)


def test_regions_come_from_botocore_offline():
    regions = checks.known_regions()
    assert {"us-west-2", "eu-central-1", "cn-north-1", "us-gov-west-1"} <= set(regions)


def test_master_image_id_replaces_only_the_masters_image():
    graph = _render(dataclasses.replace(AWS, images=PINNED, master_image_id="ami-0123abcd"))
    assert graph.of_type("aws:ec2/instance:Instance")[0].inputs["ami"] == "ami-0123abcd"
    assert _pools(graph)["compute-pool"]["image_id"] == PINNED.compute_agent
