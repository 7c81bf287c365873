"""Settings of one AWS cluster, from ``det deploy aws up`` flags (defaults follow Determined)."""

from __future__ import annotations

import dataclasses
import re

from det.deploy.common.errors import DeployError

PROJECT = "det-aws"
# Every instance of the cluster carries this tag; the master's IAM policy only lets it create
# and terminate instances that carry it with the cluster's id.
CLUSTER_TAG = "det-cluster"
CLUSTER_ID_RE = re.compile(r"^[a-zA-Z][-a-zA-Z0-9]{0,31}$")
# Ubuntu 22.04 LTS from Canonical's account, for the master (and agents unless --agent-image-id).
UBUNTU_OWNER = "099720109477"
UBUNTU_NAME = "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*"


@dataclasses.dataclass(frozen=True)
class AwsConfig:
    cluster_id: str
    region: str = "us-west-2"
    keypair: str | None = None
    inbound_cidr: str = "0.0.0.0/0"
    enable_ssh: bool = False
    port: int = 8080
    master_instance_type: str = "m6i.large"
    aux_agent_instance_type: str = "m5.xlarge"
    compute_agent_instance_type: str = "g4dn.metal"
    agent_image_id: str | None = None
    min_dynamic_agents: int = 0
    max_dynamic_agents: int = 5
    max_aux_containers_per_agent: int = 16
    max_idle_agent_period: str = "10m"
    max_agent_starting_period: str = "20m"
    spot: bool = False
    spot_max_price: str | None = None
    scheduler_type: str = "fair_share"
    preemption_enabled: bool = False
    db_instance_type: str = "db.m7g.large"
    db_size: int = 20
    bucket_versioning: bool = False
    vpc_id: str | None = None
    public_subnet_ids: tuple[str, ...] = ()
    private_subnet_ids: tuple[str, ...] = ()
    agent_subnet_id: str | None = None
    det_package: str = "det[master,aws]"
    extra_tags: tuple[tuple[str, str], ...] = ()
    cpu_env_image: str | None = None
    gpu_env_image: str | None = None

    def validate(self) -> None:
        if not CLUSTER_ID_RE.match(self.cluster_id):
            raise DeployError(
                "--cluster-id must start with a letter and contain only letters, digits and '-' (max 32)"
            )
        if self.min_dynamic_agents < 0 or self.max_dynamic_agents < self.min_dynamic_agents:
            raise DeployError("--max-dynamic-agents must be >= --min-dynamic-agents >= 0")
        if self.vpc_id and (len(self.public_subnet_ids) < 1 or len(self.private_subnet_ids) < 2):
            raise DeployError(
                "--vpc-id needs --public-subnet-ids (at least 1) and --private-subnet-ids (at least 2 AZs)"
            )
        if (self.public_subnet_ids or self.private_subnet_ids) and not self.vpc_id:
            raise DeployError("--public-subnet-ids/--private-subnet-ids need --vpc-id")
        if bool(self.cpu_env_image) != bool(self.gpu_env_image):
            raise DeployError("if a CPU or GPU environment image is specified, both should be")
        if self.preemption_enabled and self.scheduler_type != "priority":
            raise DeployError(
                "--preemption-enabled is only supported with --scheduler-type priority"
            )

    @property
    def tags(self) -> dict[str, str]:
        return {**dict(self.extra_tags), CLUSTER_TAG: self.cluster_id, "managed-by": "det"}
