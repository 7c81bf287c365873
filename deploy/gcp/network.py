"""Network, subnetwork and firewall rules of a GCP cluster.

Rules allow, and only allow: the master port (and SSH when asked) from ``--inbound-cidr`` to
the master; the master port from the cluster's subnet to the master (agents and tasks); any
TCP/UDP from the subnet to agents (distributed training, proxied tasks). PostgreSQL (Cloud SQL)
is reached over private service access, never through a firewall opening.
"""

from __future__ import annotations

import dataclasses

import pulumi
import pulumi_gcp as gcp

from det.deploy.common.masteryaml import task_port
from det.deploy.gcp.config import GcpConfig


@dataclasses.dataclass
class NetworkArgs:
    project: str
    region: str
    network: str
    subnetwork: str
    cidr: str
    existing: bool = False


class Network(pulumi.ComponentResource):
    network_id: pulumi.Output[str]
    network_name: pulumi.Output[str]
    subnetwork_id: pulumi.Output[str]
    cidr: pulumi.Output[str]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("det:gcp:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        if args.existing:
            self.network_name = pulumi.Output.from_input(args.network)
            self.network_id = pulumi.Output.from_input(
                f"projects/{args.project}/global/networks/{args.network}"
            )
            sub = gcp.compute.get_subnetwork_output(
                name=args.subnetwork, region=args.region, project=args.project
            )
            self.subnetwork_id = pulumi.Output.from_input(
                f"projects/{args.project}/regions/{args.region}/subnetworks/{args.subnetwork}"
            )
            self.cidr = sub.ip_cidr_range
        else:
            net = gcp.compute.Network(
                name,
                name=args.network,
                project=args.project,
                auto_create_subnetworks=False,
                opts=child,
            )
            subnet = gcp.compute.Subnetwork(
                name,
                name=args.subnetwork,
                project=args.project,
                region=args.region,
                network=net.id,
                ip_cidr_range=args.cidr,
                private_ip_google_access=True,
                opts=child,
            )
            self.network_name = net.name
            self.network_id = net.id
            self.subnetwork_id = subnet.id
            self.cidr = pulumi.Output.from_input(args.cidr)
        self.register_outputs({"network_id": self.network_id, "subnetwork_id": self.subnetwork_id})


@dataclasses.dataclass
class FirewallArgs:
    project: str
    network: pulumi.Input[str]
    cidr: pulumi.Input[str]
    inbound_cidr: str
    port: int
    master_tag: str
    agent_tag: str
    enable_ssh: bool


class Firewall(pulumi.ComponentResource):
    def __init__(self, name: str, args: FirewallArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("det:gcp:Firewall", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        def rule(
            suffix: str,
            sources: pulumi.Input[list[str]],
            targets: list[str],
            allows: list[tuple[str, list[str] | None]],
            description: str,
        ) -> None:
            gcp.compute.Firewall(
                f"{name}-{suffix}",
                name=f"{name}-{suffix}",
                project=args.project,
                network=args.network,
                direction="INGRESS",
                source_ranges=sources,
                target_tags=targets,
                allows=[
                    gcp.compute.FirewallAllowArgs(protocol=p, ports=ports) for p, ports in allows
                ],
                description=description,
                opts=child,
            )

        internal = pulumi.Output.from_input(args.cidr).apply(lambda c: [c])
        port = str(args.port)
        rule(
            "master-api",
            [args.inbound_cidr],
            [args.master_tag],
            [("tcp", [port, str(task_port(args.port))])],
            "det API and WebUI; its task origin (notebooks, TensorBoards)",
        )
        rule(
            "internal-master",
            internal,
            [args.master_tag],
            [("tcp", [port])],
            "agents and tasks to the master",
        )
        rule(
            "internal-agents",
            internal,
            [args.agent_tag],
            [("tcp", ["1-65535"]), ("udp", ["1-65535"])],
            "between agents; master to agents",
        )
        if args.enable_ssh:
            rule(
                "ssh",
                [args.inbound_cidr],
                [args.master_tag, args.agent_tag],
                [("tcp", ["22"])],
                "SSH",
            )
        self.register_outputs({})


def for_cluster(name: str, cfg: GcpConfig, master_tag: str, agent_tag: str) -> Network:
    """The cluster's network and its firewall as ``cfg`` asks: the same for a VM master and a
    serverless one."""
    net = Network(
        name,
        NetworkArgs(
            project=cfg.project_id,
            region=cfg.region,
            network=cfg.network_name,
            subnetwork=cfg.subnetwork_name,
            cidr=cfg.subnet_cidr,
            existing=cfg.existing_network,
        ),
    )
    Firewall(
        name,
        FirewallArgs(
            project=cfg.project_id,
            network=net.network_id,
            cidr=net.cidr,
            inbound_cidr=cfg.inbound_cidr,
            port=cfg.port,
            master_tag=master_tag,
            agent_tag=agent_tag,
            enable_ssh=cfg.enable_ssh,
        ),
    )
    return net
