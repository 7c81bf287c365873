"""Settings of one AWS cluster, from ``det deploy aws up`` flags (defaults follow Determined)."""

from __future__ import annotations

import dataclasses
import re

from det.deploy.aws import checks
from det.deploy.common import gc_image, limits, mirror
from det.deploy.common.boot import BootOptions
from det.deploy.common.errors import DeployError
from det.deploy.common.masteryaml import DEFAULT_CPU_ENV_IMAGE, DEFAULT_GPU_ENV_IMAGE
from det.deploy.common.registry import RegistryAuth
from det.deploy.common.serverless import MASTER_KINDS, SERVERLESS, VM, Rollout

PROJECT = "det-aws"
# Every instance of the cluster carries this tag; the master's IAM policy only lets it create
# and terminate instances that carry it with the cluster's id.
CLUSTER_TAG = "det-cluster"
# Agents carry a hash of the master.yaml they were launched for; `up` replaces agents whose
# hash differs from the new config's (see commands.replace_stale_agents).
CONFIG_HASH_TAG = "det-config-hash"
# Lower case, no "--", no "-" at the end: the id names the RDS instance (Pulumi's autoname keeps
# the case and Terraform's check refuses upper case) and its final snapshot (limits.rds_identifier).
CLUSTER_ID_RE = re.compile(r"^[a-z]([-a-z0-9]{0,30}[a-z0-9])?$")

# Public SSM parameters that name the current image in every region. They are read once, at the
# first `up`, and the ids are pinned in the stack (outputs `images`): a later `up` keeps them
# unless `--refresh-images`, so the master is never replaced by a new image by surprise.
# Canonical's Ubuntu 24.04 LTS (Python 3.12), for the master and the aux (CPU) pool.
UBUNTU_SSM_PARAMETER = (
    "/aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/ebs-gp3/ami-id"
)
# AWS Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04): NVIDIA driver, Docker and the
# NVIDIA container toolkit, for the compute (GPU) pool.
DLAMI_SSM_PARAMETER = (
    "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"
)
# RDS for PostgreSQL's major version (storage.Database; preflight checks the class runs it).
POSTGRES_MAJOR = "16"
HTTPS_PORT = 8443
HTTP_PORT = 8080
LOG_RETENTION_DAYS = 30
DB_KINDS = ("rds", "serverless")
# Aurora PostgreSQL for ``--db serverless``: a minimum of 0 ACU (automatic pause) needs 16.3 or
# later in the 16 line (Aurora Serverless v2 capacity, Amazon Aurora User Guide).
AURORA_POSTGRES_VERSION = "16.6"


@dataclasses.dataclass(frozen=True)
class Images:
    """AMI ids of one cluster: resolved once and pinned (see :data:`UBUNTU_SSM_PARAMETER`)."""

    master: str
    aux_agent: str
    compute_agent: str

    def as_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class AwsConfig(mirror.PoolImages):
    cluster_id: str
    region: str = "us-west-2"
    keypair: str | None = None
    inbound_cidr: str = "0.0.0.0/0"
    enable_ssh: bool = False
    tls: bool = True
    port: int = HTTPS_PORT
    master_instance_type: str = "m6i.large"
    aux_agent_instance_type: str = "m5.xlarge"
    # A first cluster that fits a new account (docs/deploy.md, Quotas): one T4 per agent, at
    # most 2 agents a pool (8 G-family vCPUs); larger fleets are one flag away.
    compute_agent_instance_type: str = "g4dn.xlarge"
    agent_image_id: str | None = None
    master_image_id: str | None = None
    """The master's AMI (``--master-image-id``), instead of Ubuntu 24.04."""
    """One AMI for both agent pools (``--agent-image-id``), instead of the defaults."""
    images: Images | None = None
    """Pinned AMI ids; None renders SSM look-ups (the offline dry-run)."""
    zones: tuple[str, ...] = ()
    """A new VPC's two availability zones, chosen by preflight (``pick_zones``) among those
    offering the instance types and pinned in the stack (output ``zones``); empty: the region's
    first two (the dry-run, and stacks made before zones were pinned)."""
    min_dynamic_agents: int = 0
    max_dynamic_agents: int = 2
    max_aux_containers_per_agent: int = 16
    max_idle_agent_period: str = "10m"
    max_agent_starting_period: str = "20m"
    spot: bool = False
    spot_max_price: str | None = None
    create_spot_service_role: bool = True
    """With ``spot``: the account has no spot service-linked role yet, so the stack makes one
    (preflight sets False when it exists)."""
    scheduler_type: str = "fair_share"
    preemption_enabled: bool = False
    db_instance_type: str = "db.m7g.large"
    db_size: int = 20
    bucket_versioning: bool = False
    vpc_id: str | None = None
    public_subnet_ids: tuple[str, ...] = ()
    private_subnet_ids: tuple[str, ...] = ()
    agent_subnet_id: str | None = None
    boot: BootOptions = dataclasses.field(default_factory=BootOptions)
    """Which det the VMs install and the master's TLS material (``common.boot``)."""
    registry: RegistryAuth | None = None
    """A private registry for task images (``--registry-*``; its password is in the secret)."""
    extra_tags: tuple[tuple[str, str], ...] = ()
    cpu_env_image: str | None = None
    gpu_env_image: str | None = None
    log_retention_days: int = LOG_RETENTION_DAYS
    master: str = VM
    """``vm`` (an EC2 master) or ``serverless`` (ECS Fargate: ``aws/serverless.py``). The CLI's
    choice for a new cluster is ``serverless.DEFAULT_MASTER``; this default is the program's."""
    db: str | None = None
    """``rds`` or ``serverless`` (Aurora Serverless v2); None: ``serverless`` with a serverless
    master, else ``rds``."""
    domain: str | None = None
    """Serverless: the master's host name (an ACM certificate on the load balancer); None: a
    CloudFront distribution's own name."""
    rollout: Rollout | None = None
    """Serverless: the images of this pass of ``up`` (None: the release everywhere, dry-run)."""
    mirror_registry: str | None = None
    """``--mirror-images``: ``<account>.dkr.ecr.<region>.amazonaws.com/det-<cluster>``, where the
    task images are mirrored (``common.mirror``); the pools' defaults point there."""
    checkpoint_gc_image: str | None = None
    """``--checkpoint-gc-image``: the image of checkpoint-GC tasks (``common.gc_image``); None:
    det's own (built and mirrored) with ``--mirror-images``, else the task image."""

    @property
    def serverless(self) -> bool:
        return self.master == SERVERLESS

    @property
    def db_kind(self) -> str:
        return self.db or ("serverless" if self.serverless else "rds")

    def validate(self) -> None:
        if self.master not in MASTER_KINDS:
            raise DeployError(
                f"--master must be one of {', '.join(MASTER_KINDS)}, not {self.master!r}"
            )
        if self.db is not None and self.db not in DB_KINDS:
            raise DeployError(f"--db must be one of {', '.join(DB_KINDS)}, not {self.db!r}")
        if self.domain and not self.serverless:
            raise DeployError("--domain is only used with --master serverless")
        if self.db == "serverless" and not self.serverless:
            raise DeployError("--db serverless is only used with --master serverless")
        if self.domain and not checks.looks_like_host_name(self.domain):
            raise DeployError(
                f"--domain {self.domain!r}: expected a DNS name such as det.example.com"
            )
        if not CLUSTER_ID_RE.match(self.cluster_id) or "--" in self.cluster_id:
            raise DeployError(
                f"--cluster-id {self.cluster_id!r}: at most 32 lower-case letters, digits and '-', "
                "a letter first, no '--' and no '-' at the end (it names the RDS database)"
            )
        checks.check_region(self.region)
        checks.check_cidr("--inbound-cidr", self.inbound_cidr)
        for flag, value in (
            ("--master-instance-type", self.master_instance_type),
            ("--aux-agent-instance-type", self.aux_agent_instance_type),
            ("--compute-agent-instance-type", self.compute_agent_instance_type),
        ):
            checks.check_instance_type(flag, value)
        checks.check_db_instance_class(self.db_instance_type)
        if self.agent_image_id:
            checks.check_ami_id("--agent-image-id", self.agent_image_id)
        if self.master_image_id:
            checks.check_ami_id("--master-image-id", self.master_image_id)
        if not limits.RDS_GP3_MIN_GIB <= self.db_size <= limits.RDS_GP3_MAX_GIB:
            raise DeployError(
                f"--db-size {self.db_size}: RDS for PostgreSQL on gp3 takes "
                f"{limits.RDS_GP3_MIN_GIB}-{limits.RDS_GP3_MAX_GIB} GiB"
            )
        room = limits.AWS_MAX_TAGS - limits.AWS_OWN_AGENT_TAGS
        if len(self.extra_tags) > room:
            raise DeployError(f"--add-tag: at most {room} tags (AWS allows 50 per resource)")
        for key, value in self.extra_tags:
            if problem := limits.aws_tag(key, value):
                raise DeployError(f"--add-tag: {problem}")
        if not 1 <= self.port <= 65535:
            raise DeployError(f"--port must be between 1 and 65535, got {self.port}")
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
        gc_image.check_flag(self.checkpoint_gc_image)

    @property
    def tags(self) -> dict[str, str]:
        return {**dict(self.extra_tags), CLUSTER_TAG: self.cluster_id, "managed-by": "det"}

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def source_env_images(self) -> tuple[str, str]:
        """The task images ``(cpu, cuda)`` as given: the flags, else Determined's defaults."""
        if self.cpu_env_image and self.gpu_env_image:
            return self.cpu_env_image, self.gpu_env_image
        return DEFAULT_CPU_ENV_IMAGE, DEFAULT_GPU_ENV_IMAGE

    @property
    def mirror_target(self) -> str | None:
        return self.mirror_registry

    @property
    def log_group_name(self) -> str:
        return f"/det/{self.cluster_id}"
