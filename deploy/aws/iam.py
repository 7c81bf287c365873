"""IAM roles of an AWS cluster: the policy documents (pure) and the component.

The master may create, tag and terminate EC2 instances only when they carry
``det-cluster=<cluster id>`` (``aws:RequestTag`` at creation, ``aws:ResourceTag`` afterwards),
launch them only into the agent subnet and security group, pass only the agent role, and read
and write only the checkpoint bucket and its own secret. ``Describe*`` cannot be scoped by
resource in EC2, so those actions alone use ``"*"`` (and ``ecr:GetAuthorizationToken``, which
IAM only grants on ``"*"``).

Both roles may write boot logs to the cluster's log group only; agents may pull images from
ECR with their role. With ``--spot`` on an account that never used spot, the stack creates the
account-wide spot service-linked role and keeps it on ``down`` (other clusters may use it).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import NotRequired, TypedDict

import pulumi
import pulumi_aws as aws

from det.deploy.aws.config import CLUSTER_TAG

# A condition block: operator -> condition key -> value(s).
ConditionBlock = Mapping[str, Mapping[str, str | list[str]]]


class Statement(TypedDict):
    """One statement of an IAM policy document (the keys det writes)."""

    Sid: NotRequired[str]
    Effect: str
    Action: str | list[str]
    Resource: NotRequired[str | list[str]]
    Principal: NotRequired[Mapping[str, str]]
    Condition: NotRequired[ConditionBlock]


class PolicyDocument(TypedDict):
    Version: str
    Statement: list[Statement]


# Resources RunInstances creates that the provisioner tags at creation (TagSpecifications).
_CREATED = ("instance", "volume", "spot-instances-request")


def _ec2_arns(region: str, kinds: tuple[str, ...]) -> list[str]:
    return [f"arn:aws:ec2:{region}:*:{kind}/*" for kind in kinds]


def assume_role_policy(service: str = "ec2.amazonaws.com") -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}
            ],
        }
    )


def _bucket_statements(bucket_arn: str) -> list[Statement]:
    return [
        {
            "Sid": "BucketList",
            "Effect": "Allow",
            "Action": ["s3:ListBucket", "s3:GetBucketLocation"],
            "Resource": bucket_arn,
        },
        {
            "Sid": "BucketObjects",
            "Effect": "Allow",
            "Action": [
                "s3:GetObject",
                "s3:PutObject",
                "s3:DeleteObject",
                "s3:AbortMultipartUpload",
            ],
            "Resource": f"{bucket_arn}/*",
        },
    ]


#: What the machines' log shipper (``common.logship``) calls, and no more.
LOG_WRITE_ACTIONS = ("logs:CreateLogStream", "logs:PutLogEvents")
#: What ``det deploy aws status`` (``bootlog.tail``) calls with the deploying user's
#: credentials, besides ``sts:GetCallerIdentity``, which needs no permission.
LOG_READ_ACTIONS = ("logs:DescribeLogStreams", "logs:GetLogEvents")
#: ... and to find the cluster's running agents (EC2 scopes no Describe action to a resource).
STATUS_READ_ACTIONS = (*LOG_READ_ACTIONS, "ec2:DescribeInstances")


def log_statements(log_group_arn: str) -> list[Statement]:
    """Write boot logs into one log group (its streams are ``<group arn>:log-stream:*``)."""
    return [
        {
            "Sid": "BootLogs",
            "Effect": "Allow",
            "Action": list(LOG_WRITE_ACTIONS),
            "Resource": [log_group_arn, f"{log_group_arn}:*"],
        }
    ]


def status_reader_policy(log_group_arn: str) -> PolicyDocument:
    """The deploying user's grant for ``status``: read one cluster's boot logs (the group for
    DescribeLogStreams, its streams ``<group arn>:log-stream:*`` for GetLogEvents) and list
    instances (to find the cluster's agents; DescribeInstances takes only ``*``)."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ReadBootLogs",
                "Effect": "Allow",
                "Action": list(LOG_READ_ACTIONS),
                "Resource": [log_group_arn, f"{log_group_arn}:*"],
            },
            {
                "Sid": "FindAgents",
                "Effect": "Allow",
                "Action": [a for a in STATUS_READ_ACTIONS if a not in LOG_READ_ACTIONS],
                "Resource": "*",
            },
        ],
    }


def ecr_pull_statements(region: str) -> list[Statement]:
    return [
        {
            "Sid": "EcrLogin",
            "Effect": "Allow",
            "Action": "ecr:GetAuthorizationToken",
            "Resource": "*",
        },
        {
            "Sid": "EcrPull",
            "Effect": "Allow",
            "Action": [
                "ecr:BatchGetImage",
                "ecr:GetDownloadUrlForLayer",
                "ecr:BatchCheckLayerAvailability",
            ],
            "Resource": f"arn:aws:ecr:{region}:*:repository/*",
        },
    ]


def _launch_statements(
    cluster_id: str, region: str, agent_subnet_arn: str, agent_sg_arn: str, keypair: str | None
) -> list[Statement]:
    """The master launches agents tagged with its cluster, into the agent subnet and group."""
    request_tag: ConditionBlock = {"StringEquals": {f"aws:RequestTag/{CLUSTER_TAG}": cluster_id}}
    # Resources RunInstances only references (the AMI, the agent subnet and security group) or
    # creates untagged as part of the instance (its network interface, which cannot be used
    # on its own: CreateNetworkInterface is not granted).
    referenced = [
        f"arn:aws:ec2:{region}::image/*",
        f"arn:aws:ec2:{region}:*:network-interface/*",
        agent_subnet_arn,
        agent_sg_arn,
    ]
    if keypair:
        referenced.append(f"arn:aws:ec2:{region}:*:key-pair/{keypair}")
    return [
        {
            "Sid": "LaunchTaggedAgents",
            "Effect": "Allow",
            "Action": ["ec2:RunInstances", "ec2:RequestSpotInstances"],
            "Resource": _ec2_arns(region, _CREATED),
            "Condition": request_tag,
        },
        {
            "Sid": "LaunchReferences",
            "Effect": "Allow",
            "Action": ["ec2:RunInstances", "ec2:RequestSpotInstances"],
            "Resource": referenced,
        },
        {
            "Sid": "TagOnLaunch",
            "Effect": "Allow",
            "Action": "ec2:CreateTags",
            "Resource": _ec2_arns(region, _CREATED),
            "Condition": {
                **request_tag,
                "StringEqualsIfExists": {
                    "ec2:CreateAction": ["RunInstances", "RequestSpotInstances"]
                },
            },
        },
    ]


def _manage_statements(cluster_id: str, region: str, agent_role_arn: str) -> list[Statement]:
    """The master stops, starts and terminates its own agents only, describes EC2 (which scopes
    no Describe action to a resource) and passes the agent role to EC2 only."""
    resource_tag: ConditionBlock = {"StringEquals": {f"aws:ResourceTag/{CLUSTER_TAG}": cluster_id}}
    return [
        {
            "Sid": "ManageOwnAgents",
            "Effect": "Allow",
            "Action": [
                "ec2:TerminateInstances",
                "ec2:StopInstances",
                "ec2:StartInstances",
                "ec2:CancelSpotInstanceRequests",
                "ec2:CreateTags",
            ],
            "Resource": _ec2_arns(region, ("instance", "spot-instances-request")),
            "Condition": resource_tag,
        },
        {
            "Sid": "Describe",
            "Effect": "Allow",
            "Action": [
                "ec2:DescribeInstances",
                "ec2:DescribeInstanceStatus",
                "ec2:DescribeInstanceTypes",
                "ec2:DescribeSpotInstanceRequests",
                "ec2:DescribeSpotPriceHistory",
                "ec2:DescribeImages",
                "ec2:DescribeSubnets",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeAvailabilityZones",
                "ec2:DescribeInstanceTypeOfferings",
            ],
            "Resource": "*",
        },
        {
            "Sid": "PassAgentRole",
            "Effect": "Allow",
            "Action": "iam:PassRole",
            "Resource": agent_role_arn,
            "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
        },
    ]


def master_policy(
    *,
    cluster_id: str,
    region: str,
    bucket_arn: str,
    agent_role_arn: str,
    agent_subnet_arn: str,
    agent_sg_arn: str,
    secret_arn: str,
    keypair: str | None,
    log_group_arn: str | None = None,
) -> PolicyDocument:
    """The VM master's role: its agents (tagged with the cluster), the bucket, its secret."""
    statements: list[Statement] = [
        *_launch_statements(cluster_id, region, agent_subnet_arn, agent_sg_arn, keypair),
        *_manage_statements(cluster_id, region, agent_role_arn),
        *_bucket_statements(bucket_arn),
        {
            "Sid": "ClusterSecret",
            "Effect": "Allow",
            "Action": "secretsmanager:GetSecretValue",
            "Resource": secret_arn,
        },
    ]
    if log_group_arn:
        statements += log_statements(log_group_arn)
    return {"Version": "2012-10-17", "Statement": statements}


def agent_policy(
    bucket_arn: str, region: str | None = None, log_group_arn: str | None = None
) -> PolicyDocument:
    statements = _bucket_statements(bucket_arn)
    if region:
        statements += ecr_pull_statements(region)
    if log_group_arn:
        statements += log_statements(log_group_arn)
    return {"Version": "2012-10-17", "Statement": statements}


def log_group_arn(region: str, name: str) -> str:
    return f"arn:aws:logs:{region}:*:log-group:{name}"


def service_role(
    name: str,
    service: str,
    policy: pulumi.Input[str],
    tags: Mapping[str, str],
    opts: pulumi.ResourceOptions,
) -> aws.iam.Role:
    """A role ``service`` assumes, with its one inline policy (both named ``name``)."""
    role = aws.iam.Role(
        name, assume_role_policy=assume_role_policy(service), tags=dict(tags), opts=opts
    )
    aws.iam.RolePolicy(name, role=role.id, policy=policy, opts=opts)
    return role


@dataclasses.dataclass
class IamArgs:
    cluster_id: str
    region: str
    keypair: str | None
    bucket_arn: pulumi.Input[str]
    agent_subnet_arn: pulumi.Input[str]
    agent_sg_arn: pulumi.Input[str]
    secret_arn: pulumi.Input[str]
    tags: Mapping[str, str]
    log_group_name: str | None = None
    spot_service_role: bool = False
    """Create the account's spot service-linked role (preflight found none)."""


class Iam(pulumi.ComponentResource):
    master_profile_name: pulumi.Output[str]
    agent_profile_arn: pulumi.Output[str]
    agent_role_arn: pulumi.Output[str]

    def __init__(self, name: str, args: IamArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("det:aws:Iam", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        logs_arn = log_group_arn(args.region, args.log_group_name) if args.log_group_name else None
        if args.spot_service_role:
            # Account-wide and shared by every cluster: kept when this stack is destroyed.
            aws.iam.ServiceLinkedRole(
                f"{name}-spot",
                aws_service_name="spot.amazonaws.com",
                opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
            )
        agent_role = service_role(
            f"{name}-agent",
            "ec2.amazonaws.com",
            pulumi.Output.from_input(args.bucket_arn).apply(
                lambda b: json.dumps(agent_policy(b, args.region, logs_arn))
            ),
            tags,
            child,
        )
        agent_profile = aws.iam.InstanceProfile(
            f"{name}-agent", role=agent_role.name, tags=tags, opts=child
        )

        document = pulumi.Output.all(
            bucket=args.bucket_arn,
            agent_role=agent_role.arn,
            subnet=args.agent_subnet_arn,
            sg=args.agent_sg_arn,
            secret=args.secret_arn,
        ).apply(
            lambda v: json.dumps(
                master_policy(
                    cluster_id=args.cluster_id,
                    region=args.region,
                    bucket_arn=v["bucket"],
                    agent_role_arn=v["agent_role"],
                    agent_subnet_arn=v["subnet"],
                    agent_sg_arn=v["sg"],
                    secret_arn=v["secret"],
                    keypair=args.keypair,
                    log_group_arn=logs_arn,
                )
            )
        )
        master_role = service_role(f"{name}-master", "ec2.amazonaws.com", document, tags, child)
        master_profile = aws.iam.InstanceProfile(
            f"{name}-master", role=master_role.name, tags=tags, opts=child
        )

        self.master_profile_name = master_profile.name
        self.agent_profile_arn = agent_profile.arn
        self.agent_role_arn = agent_role.arn
        self.register_outputs(
            {
                "master_profile_name": master_profile.name,
                "agent_profile_arn": agent_profile.arn,
                "agent_role_arn": agent_role.arn,
            }
        )
