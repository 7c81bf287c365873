"""Network and security groups of an AWS cluster.

A new VPC gets two public subnets (master and agents, with an internet gateway) and two private
subnets without any route to the internet (the database). Security groups allow, and only allow:
the master port (and SSH when asked) from ``--inbound-cidr``; agents to the master port; any
traffic between agents (distributed training) and from the master to agents (proxied tasks);
PostgreSQL only from the master's group.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence

import pulumi
import pulumi_aws as aws

from det.common.ports import TASK_SERVICE_PORTS
from det.deploy.aws.config import AwsConfig
from det.deploy.common.masteryaml import task_port

VPC_CIDR = "10.0.0.0/16"
PUBLIC_CIDRS = ("10.0.0.0/20", "10.0.16.0/20")
PRIVATE_CIDRS = ("10.0.128.0/20", "10.0.144.0/20")


def _pick(names: Sequence[str], index: int) -> str:
    return names[index % len(names)]


@dataclasses.dataclass
class NetworkArgs:
    tags: Mapping[str, str]
    vpc_id: str | None = None
    public_subnet_ids: Sequence[str] = ()
    private_subnet_ids: Sequence[str] = ()
    zones: Sequence[str] = ()
    """The two availability zones of a new VPC's subnets; empty: the region's first two."""


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    public_subnet_ids: list[pulumi.Output[str]]
    private_subnet_ids: list[pulumi.Output[str]]
    zones: list[pulumi.Output[str]]
    """The availability zones of the subnets it made (none for an existing VPC)."""

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("det:aws:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        if args.vpc_id:
            self.vpc_id = pulumi.Output.from_input(args.vpc_id)
            self.public_subnet_ids = [pulumi.Output.from_input(s) for s in args.public_subnet_ids]
            self.private_subnet_ids = [pulumi.Output.from_input(s) for s in args.private_subnet_ids]
            self.zones = []
        else:
            self._create(name, args, child)
        self.register_outputs(
            {
                "vpc_id": self.vpc_id,
                "public_subnet_ids": self.public_subnet_ids,
                "private_subnet_ids": self.private_subnet_ids,
            }
        )

    def _create(self, name: str, args: NetworkArgs, child: pulumi.ResourceOptions) -> None:
        tags = dict(args.tags)
        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=VPC_CIDR,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={**tags, "Name": name},
            opts=child,
        )
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags=tags, opts=child)
        public_rt = aws.ec2.RouteTable(
            f"{name}-public",
            vpc_id=vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
            tags=tags,
            opts=child,
        )
        # The private route table has only the implicit local route: the database never
        # needs to reach the internet.
        private_rt = aws.ec2.RouteTable(f"{name}-private", vpc_id=vpc.id, tags=tags, opts=child)
        zones: pulumi.Output[list[str]] = (
            pulumi.Output.from_input(list(args.zones))
            if args.zones
            else aws.get_availability_zones_output(state="available").names
        )
        self.public_subnet_ids, self.private_subnet_ids = [], []
        self.zones = []
        for i in range(2):
            az = zones.apply(functools.partial(_pick, index=i))
            public = aws.ec2.Subnet(
                f"{name}-public-{i}",
                vpc_id=vpc.id,
                cidr_block=PUBLIC_CIDRS[i],
                availability_zone=az,
                map_public_ip_on_launch=True,
                tags={**tags, "Name": f"{name}-public-{i}"},
                opts=child,
            )
            private = aws.ec2.Subnet(
                f"{name}-private-{i}",
                vpc_id=vpc.id,
                cidr_block=PRIVATE_CIDRS[i],
                availability_zone=az,
                map_public_ip_on_launch=False,
                tags={**tags, "Name": f"{name}-private-{i}"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{i}", subnet_id=public.id, route_table_id=public_rt.id, opts=child
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{i}",
                subnet_id=private.id,
                route_table_id=private_rt.id,
                opts=child,
            )
            self.zones.append(az)
            self.public_subnet_ids.append(public.id)
            self.private_subnet_ids.append(private.id)
        self.vpc_id = vpc.id


def security_group(
    name: str,
    vpc_id: pulumi.Input[str],
    tags: Mapping[str, str],
    child: pulumi.ResourceOptions,
    role: str,
    description: str,
    egress: bool,
) -> aws.ec2.SecurityGroup:
    """``<name>-<role>``: no ingress of its own (rules are added one by one, each named);
    egress anywhere, or none."""
    everywhere = [
        aws.ec2.SecurityGroupEgressArgs(
            protocol="-1", from_port=0, to_port=0, cidr_blocks=["0.0.0.0/0"]
        )
    ]
    return aws.ec2.SecurityGroup(
        f"{name}-{role}",
        vpc_id=vpc_id,
        description=description,
        egress=everywhere if egress else [],
        tags={**tags, "Name": f"{name}-{role}"},
        opts=child,
    )


def ingress_rule(
    name: str,
    child: pulumi.ResourceOptions,
    rule: str,
    to: aws.ec2.SecurityGroup,
    ports: tuple[int, int] | None,
    description: str,
    *,
    source: aws.ec2.SecurityGroup | None = None,
    cidr: str | None = None,
    prefix_list: pulumi.Input[str] | None = None,
) -> None:
    """``<name>-<rule>``: TCP on ``ports`` (None: every protocol) into ``to`` from a group, an
    address range or a managed prefix list."""
    aws.vpc.SecurityGroupIngressRule(
        f"{name}-{rule}",
        security_group_id=to.id,
        ip_protocol="tcp" if ports else "-1",
        from_port=ports[0] if ports else None,
        to_port=ports[1] if ports else None,
        referenced_security_group_id=source.id if source else None,
        cidr_ipv4=cidr,
        prefix_list_id=prefix_list,
        description=description,
        opts=child,
    )


@dataclasses.dataclass
class SecurityGroupsArgs:
    vpc_id: pulumi.Input[str]
    inbound_cidr: str
    port: int
    enable_ssh: bool
    tags: Mapping[str, str]


class SecurityGroups(pulumi.ComponentResource):
    master_sg_id: pulumi.Output[str]
    agent_sg_id: pulumi.Output[str]
    db_sg_id: pulumi.Output[str]
    agent_sg_arn: pulumi.Output[str]

    def __init__(
        self, name: str, args: SecurityGroupsArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("det:aws:SecurityGroups", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        group = functools.partial(security_group, name, args.vpc_id, tags, child)
        master = group("master", "det master", True)
        agent = group("agent", "det agents", True)
        db = group("db", "det database", False)
        rule = functools.partial(ingress_rule, name, child)
        api, tasks = (args.port, args.port), (task_port(args.port), task_port(args.port))
        rule("master-api", master, api, "det API and WebUI", cidr=args.inbound_cidr)
        rule(
            "master-tasks",
            master,
            tasks,
            "det task origin (notebooks, TensorBoards through the task proxy)",
            cidr=args.inbound_cidr,
        )
        rule("agent-to-master", master, api, "agents to the master", source=agent)
        rule("agent-to-agent", agent, None, "between agents (distributed training)", source=agent)
        rule(
            "master-to-agent",
            agent,
            (TASK_SERVICE_PORTS[0], TASK_SERVICE_PORTS[-1]),
            "master to task services on the agents (the task proxy)",
            source=master,
        )
        rule("master-to-db", db, (5432, 5432), "PostgreSQL from the master only", source=master)
        if args.enable_ssh:
            rule("ssh-master", master, (22, 22), "SSH", cidr=args.inbound_cidr)
            rule("ssh-agent", agent, (22, 22), "SSH", cidr=args.inbound_cidr)

        self.master_sg_id = master.id
        self.agent_sg_id = agent.id
        self.agent_sg_arn = agent.arn
        self.db_sg_id = db.id
        self.register_outputs(
            {"master_sg_id": master.id, "agent_sg_id": agent.id, "db_sg_id": db.id}
        )


def for_cluster(name: str, cfg: AwsConfig) -> Network:
    """The cluster's VPC and subnets as ``cfg`` asks (made, or the given ones): the same for a
    VM master and a serverless one."""
    return Network(
        name,
        NetworkArgs(
            tags=cfg.tags,
            vpc_id=cfg.vpc_id,
            public_subnet_ids=cfg.public_subnet_ids,
            private_subnet_ids=cfg.private_subnet_ids,
            zones=cfg.zones,
        ),
    )
