"""The AWS cluster graph, as the Pulumi engine would receive it (mocks, no credentials)."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from typing import Any

import pulumi
import yaml
from conftest import AWS

from det.deploy.aws import iam, program, storage
from det.deploy.aws.config import CLUSTER_TAG
from det.deploy.common import dryrun, userdata
from det.deploy.common.masteryaml import LOCAL_IP_PLACEHOLDER

WORLD = ("0.0.0.0/0", "::/0")
EC2_MUTATIONS = (
    "RunInstances",
    "TerminateInstances",
    "CreateTags",
    "StopInstances",
    "StartInstances",
    "RequestSpotInstances",
    "CancelSpotInstanceRequests",
    "DeleteTags",
    "ModifyInstanceAttribute",
)


def _statements(graph: dryrun.Rendered) -> list[dict[str, Any]]:
    out = []
    for r in graph.of_type("aws:iam/rolePolicy:RolePolicy"):
        out += json.loads(r.inputs["policy"])["Statement"]
    return out


def _as_list(value: Any) -> list[str]:
    return value if isinstance(value, list) else [value]


def test_database_is_private_and_encrypted(aws_graph, one):
    db = one(aws_graph, "aws:rds/instance:Instance")
    assert db["publiclyAccessible"] is False
    assert db["storageEncrypted"] is True
    assert db["password"] == dryrun.SECRET


def test_database_subnet_group_uses_only_private_subnets(aws_graph, one):
    group = one(aws_graph, "aws:rds/subnetGroup:SubnetGroup")
    private = {
        f"{r.name}-id"
        for r in aws_graph.of_type("aws:ec2/subnet:Subnet")
        if r.inputs["mapPublicIpOnLaunch"] is False
    }
    assert len(private) == 2
    assert set(group["subnetIds"]) == private


def test_bucket_blocks_public_access_and_is_encrypted(aws_graph, one):
    pab = one(aws_graph, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    assert all(
        pab[k] is True
        for k in (
            "blockPublicAcls",
            "blockPublicPolicy",
            "ignorePublicAcls",
            "restrictPublicBuckets",
        )
    )
    sse = one(
        aws_graph,
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    )
    assert sse["rules"][0]["applyServerSideEncryptionByDefault"]["sseAlgorithm"] in (
        "aws:kms",
        "AES256",
    )
    assert one(aws_graph, "aws:s3/bucket:Bucket")["forceDestroy"] is False


def test_no_ingress_from_the_world_except_the_master_port(aws_graph):
    rules = aws_graph.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    assert rules
    for rule in rules:
        i = rule.inputs
        cidr = i.get("cidrIpv4") or i.get("cidrIpv6")
        if cidr is None:
            continue
        assert cidr == AWS.inbound_cidr, rule.name
        public = (AWS.port, AWS.port + 1, 22)  # the API, its task origin, SSH
        assert i["ipProtocol"] == "tcp" and i["fromPort"] == i["toPort"] in public, rule.name
    for sg in aws_graph.of_type("aws:ec2/securityGroup:SecurityGroup"):
        assert not sg.inputs.get("ingress"), "ingress must be separate, reviewable rules"


def test_postgres_and_agent_ports_are_never_open_to_the_world():
    # Same program with the widest inbound cidr: still only the master port (and SSH) is public.
    cfg = dataclasses.replace(AWS, inbound_cidr="0.0.0.0/0")
    graph = dryrun.render(lambda: program.build(cfg), program.MOCK_CALLS)
    for rule in graph.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"):
        i = rule.inputs
        if (i.get("cidrIpv4") or i.get("cidrIpv6")) in WORLD:
            ports = (
                range(i["fromPort"], i["toPort"] + 1)
                if i["ipProtocol"] != "-1"
                else range(0, 65536)
            )
            assert 5432 not in ports and i["ipProtocol"] != "-1" and len(ports) == 1, rule.name


def test_database_only_reachable_from_the_master_group(aws_graph):
    db_sg = next(
        r
        for r in aws_graph.of_type("aws:ec2/securityGroup:SecurityGroup")
        if r.name.endswith("-db")
    )
    rules = [
        r.inputs
        for r in aws_graph.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
        if r.inputs["securityGroupId"] == f"{db_sg.name}-id"
    ]
    assert rules == [rules[0]] and rules[0]["referencedSecurityGroupId"] == "det-c1-master-id"
    assert rules[0]["fromPort"] == rules[0]["toPort"] == 5432
    assert db_sg.inputs["egress"] == []


def test_no_ec2_mutation_on_star_or_without_tag_condition(aws_graph):
    for s in _statements(aws_graph):
        mutations = [
            a
            for a in _as_list(s["Action"])
            if a.startswith("ec2:") and a.split(":")[1] in EC2_MUTATIONS
        ]
        if not mutations:
            continue
        resources = _as_list(s["Resource"])
        assert "*" not in resources, s
        tag_condition = json.dumps(s.get("Condition", {}))
        scoped = (
            f"aws:RequestTag/{CLUSTER_TAG}" in tag_condition
            or f"aws:ResourceTag/{CLUSTER_TAG}" in tag_condition
        )
        created = [
            r
            for r in resources
            if any(f":{k}/" in r for k in ("instance", "volume", "spot-instances-request"))
        ]
        # Instances, volumes and spot requests only with the cluster tag; the rest are
        # references (AMI, the agent subnet and security group, the key pair, the ENI).
        assert not created or scoped, s
        if scoped:
            assert '"c1"' in tag_condition


def test_only_describe_actions_use_star(aws_graph):
    for s in _statements(aws_graph):
        if "*" in _as_list(s["Resource"]):
            # IAM grants ecr:GetAuthorizationToken on "*" only; pulling still needs the
            # repository-scoped actions.
            if _as_list(s["Action"]) == ["ecr:GetAuthorizationToken"]:
                continue
            assert all(a.startswith("ec2:Describe") for a in _as_list(s["Action"])), s


def test_pass_role_only_for_the_agent_role(aws_graph):
    passes = [s for s in _statements(aws_graph) if "iam:PassRole" in _as_list(s["Action"])]
    assert len(passes) == 1
    agent_role = next(
        r for r in aws_graph.of_type("aws:iam/role:Role") if r.name.endswith("-agent")
    )
    assert passes[0]["Resource"] == f"arn:aws:iam:us-west-2:123456789012:{agent_role.name}"
    assert passes[0]["Condition"]["StringEquals"]["iam:PassedToService"] == "ec2.amazonaws.com"


def test_s3_access_only_on_the_checkpoint_bucket(aws_graph):
    bucket = "arn:aws:s3:us-west-2:123456789012:det-c1-checkpoints"
    s3 = [
        s for s in _statements(aws_graph) if any(a.startswith("s3:") for a in _as_list(s["Action"]))
    ]
    assert len(s3) == 4  # list + objects, for master and agent
    for s in s3:
        assert _as_list(s["Resource"]) in ([bucket], [f"{bucket}/*"])


def test_master_instance_has_its_instance_profile_and_imdsv2(aws_graph, one):
    master = one(aws_graph, "aws:ec2/instance:Instance")
    profiles = {
        r.name: r.inputs for r in aws_graph.of_type("aws:iam/instanceProfile:InstanceProfile")
    }
    assert master["iamInstanceProfile"] == "det-c1-master"
    assert profiles["det-c1-master"]["role"] == "det-c1-master"
    assert master["metadataOptions"]["httpTokens"] == "required"
    assert master["metadataOptions"]["httpPutResponseHopLimit"] == 1
    assert master["rootBlockDevice"]["encrypted"] is True
    assert master["keyName"] == "kp"
    assert one(aws_graph, "aws:ec2/eip:Eip")["instance"] == "det-c1-master-id"


def test_user_data_starts_the_master_without_secrets(aws_graph, one):
    outer = one(aws_graph, "aws:ec2/instance:Instance")["userData"]
    user_data = outer + userdata.boot_script_of(outer)  # the boot script is packed (16 KiB)
    assert "systemctl restart det-master" in user_data
    assert "det-master --config-file /etc/det/master.yaml" in user_data
    assert "secretsmanager" in user_data and dryrun.SECRET not in user_data
    assert "password" not in yaml.safe_load(aws_graph.outputs["master_yaml"])["db"]


def test_outputs_exist(aws_graph):
    for key in (
        "master_url",
        "bucket",
        "db_endpoint",
        "master_instance_id",
        "vpc_id",
        "agent_security_group_id",
    ):
        assert aws_graph.outputs[key], key
    assert aws_graph.outputs["master_url"] == "https://203.0.113.10:8443"
    assert aws_graph.outputs["db_endpoint"].endswith(":5432")


def test_master_yaml_parses_and_has_the_aws_pools(aws_graph):
    config = yaml.safe_load(aws_graph.outputs["master_yaml"])
    assert config["checkpoint_storage"] == {
        **config["checkpoint_storage"],
        "type": "s3",
        "bucket": aws_graph.outputs["bucket"],
    }
    assert config["db"]["host"] == aws_graph.outputs["db_endpoint"].rsplit(":", 1)[0]
    assert config["db"]["ssl_mode"] == "require"
    pools = {p["pool_name"]: p for p in config["resource_pools"]}
    assert set(pools) == {"aux-pool", "compute-pool"}
    provider = pools["compute-pool"]["provider"]
    assert (
        provider["type"] == "aws" and provider["instance_type"] == AWS.compute_agent_instance_type
    )
    assert provider["spot"] is True and provider["max_instances"] == AWS.max_dynamic_agents
    assert provider["tag_key"] == CLUSTER_TAG and provider["tag_value"] == "c1"
    assert (
        provider["network_interface"]["security_group_id"]
        == aws_graph.outputs["agent_security_group_id"]
    )
    assert provider["iam_instance_profile_arn"] == aws_graph.outputs["agent_instance_profile_arn"]
    assert provider["master_url"] == f"https://{LOCAL_IP_PLACEHOLDER}:{AWS.port}"


def test_existing_vpc_creates_no_network():
    cfg = dataclasses.replace(
        AWS,
        **{
            "vpc_id": "vpc-1",
            "public_subnet_ids": ("subnet-p",),
            "private_subnet_ids": ("subnet-a", "subnet-b"),
        },
    )
    graph = dryrun.render(lambda: program.build(cfg), program.MOCK_CALLS)
    assert not graph.of_type("aws:ec2/vpc:Vpc") and not graph.of_type("aws:ec2/subnet:Subnet")
    assert graph.of_type("aws:rds/subnetGroup:SubnetGroup")[0].inputs["subnetIds"] == [
        "subnet-a",
        "subnet-b",
    ]
    assert graph.of_type("aws:ec2/instance:Instance")[0].inputs["subnetId"] == "subnet-p"
    assert {r.inputs["vpcId"] for r in graph.of_type("aws:ec2/securityGroup:SecurityGroup")} == {
        "vpc-1"
    }


def test_master_policy_scopes_launches_to_the_agent_subnet_and_group():
    doc = iam.master_policy(
        cluster_id="c9",
        region="eu-west-1",
        bucket_arn="arn:aws:s3:::b",
        agent_role_arn="arn:aws:iam::1:role/a",
        agent_subnet_arn="arn:aws:ec2:eu-west-1:*:subnet/subnet-9",
        agent_sg_arn="arn:aws:ec2:eu-west-1:*:security-group/sg-9",
        secret_arn="arn:aws:secretsmanager:eu-west-1:1:secret:s",
        keypair=None,
    )
    refs = next(s for s in doc["Statement"] if s["Sid"] == "LaunchReferences")["Resource"]
    assert (
        "arn:aws:ec2:eu-west-1:*:subnet/subnet-9" in refs
        and "arn:aws:ec2:eu-west-1:*:subnet/*" not in refs
    )
    assert not any("key-pair" in r for r in refs)
    assert ipaddress.ip_network(AWS.inbound_cidr)  # the fixture's cidr is valid


@pulumi.runtime.test
def test_cluster_secret_outputs_are_secret():
    pulumi.runtime.set_mocks(dryrun.RecordingMocks({}), preview=False)
    secret = storage.ClusterSecret(
        "s", storage.ClusterSecretArgs(tags={}, initial_user_password="given-pw")
    )

    def check(args: list[Any]) -> None:
        password, is_secret = args
        assert password == "given-pw"
        assert is_secret is True

    return pulumi.Output.all(
        secret.initial_user_password,
        pulumi.Output.from_input(secret.initial_user_password).is_secret(),
    ).apply(check)


@pulumi.runtime.test
def test_database_component_exposes_address_and_port():
    pulumi.runtime.set_mocks(dryrun.RecordingMocks({}), preview=False)
    db = storage.Database(
        "d",
        storage.DatabaseArgs(
            private_subnet_ids=["a", "b"], security_group_id="sg", password="x", tags={}
        ),
    )

    def check(args: list[Any]) -> None:
        assert args == ["d.abc.us-west-2.rds.amazonaws.com", 5432]

    return pulumi.Output.all(db.address, db.port).apply(check)


def test_only_the_master_reaches_the_agents_task_service_ports(aws_graph):
    # The task proxy (master -> agent, JupyterLab, TensorBoard, shells): exactly those ports.
    from det.common.ports import TASK_SERVICE_PORTS

    groups = {g.name: g for g in aws_graph.of_type("aws:ec2/securityGroup:SecurityGroup")}
    rules = {
        r.name: r.inputs
        for r in aws_graph.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    }
    proxy = next(i for n, i in rules.items() if n.endswith("master-to-agent"))
    assert (proxy["ipProtocol"], proxy["fromPort"], proxy["toPort"]) == (
        "tcp",
        TASK_SERVICE_PORTS[0],
        TASK_SERVICE_PORTS[-1],
    )
    master = next(n for n in groups if n.endswith("-master"))
    agent = next(n for n in groups if n.endswith("-agent"))
    assert proxy["referencedSecurityGroupId"] == f"{master}-id"
    assert proxy["securityGroupId"] == f"{agent}-id"
