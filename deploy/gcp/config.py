"""Settings of one GCP cluster, from ``det deploy gcp up`` flags (defaults follow Determined)."""

from __future__ import annotations

import dataclasses
import re

from det.deploy.common import gc_image, limits, mirror
from det.deploy.common.boot import BootOptions
from det.deploy.common.errors import DeployError
from det.deploy.common.masteryaml import DEFAULT_CPU_ENV_IMAGE, DEFAULT_GPU_ENV_IMAGE
from det.deploy.common.registry import RegistryAuth
from det.deploy.common.serverless import MASTER_KINDS, SERVERLESS, VM, Rollout
from det.deploy.gcp import catalog

PROJECT = "det-gcp"
# Every VM of the cluster carries this label with the cluster id.
CLUSTER_LABEL = "det-cluster"
# On every agent: the digest of the master config it was launched for (masteryaml.config_hash).
CONFIG_HASH_LABEL = "det-config-hash"
# GCE names and label values: lower case, digits, '-'; Determined allows 35 characters.
# No '-' at the end: the id ends the network's and the master VM's names (RFC 1035).
CLUSTER_ID_RE = re.compile(r"^[a-z]([-a-z0-9]{0,33}[a-z0-9])?$")
# Boot images, as image families: ``up`` resolves each to one concrete image the first time and
# pins it in the stack (images.py), so a new image in the family never replaces a VM unplanned.
# The master and CPU agents: Ubuntu 24.04 LTS (Python 3.12).
UBUNTU_IMAGE = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"
# GPU agents: Google's Deep Learning VM "Base" image (NVIDIA driver R580, CUDA 12.9, Docker and the
# NVIDIA container toolkit) on Ubuntu 24.04, supported until August 2028.
GPU_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cu129-ubuntu-2404-nvidia-580"
# The master VM's boot disk (pd-balanced), in GB.
MASTER_DISK_GB = 100
HTTPS_PORT = 8443
HTTP_PORT = 8080
# The Cloud Logging log the VMs' boot and service logs are shipped to (one per project; entries are
# told apart by their instance label: det-master-<cluster id>, det-agent-<cluster id>-...).
BOOT_LOG_NAME = "det-boot"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
# The serverless master's database: shared-core, the smallest Cloud SQL (25 connections), as the
# idle cluster pays for it around the clock (--db-tier chooses another).
SERVERLESS_DB_TIER = "db-f1-micro"


@dataclasses.dataclass(frozen=True)
class GcpConfig(mirror.PoolImages):
    cluster_id: str
    project_id: str
    region: str = "us-west1"
    zone: str | None = None
    network: str | None = None
    existing_network: bool = False
    subnetwork: str | None = None
    subnet_cidr: str = "10.10.0.0/16"
    inbound_cidr: str = "0.0.0.0/0"
    enable_ssh: bool = False
    port: int = HTTPS_PORT
    tls: bool = True
    master_instance_type: str = "n1-standard-2"
    aux_agent_instance_type: str = "n1-standard-4"
    # A first cluster that fits a new project (docs/deploy.md, Quotas): one T4 on an
    # n1-standard-4 per agent, at most 2 agents a pool; larger fleets are one flag away.
    compute_agent_instance_type: str = "n1-standard-4"
    gpu_type: str = "nvidia-tesla-t4"
    gpu_num: int = 1
    preemptible: bool = False
    master_image: str = UBUNTU_IMAGE
    aux_agent_image: str = UBUNTU_IMAGE
    agent_image: str = GPU_IMAGE
    # (role, family or image asked for) once images.pin made the three images concrete.
    image_sources: tuple[tuple[str, str], ...] = ()
    disk_size: int = 200
    disk_type: str = "pd-standard"
    min_dynamic_agents: int = 0
    max_dynamic_agents: int = 2
    max_aux_containers_per_agent: int = 16
    max_idle_agent_period: str = "10m"
    max_agent_starting_period: str = "20m"
    operation_timeout_period: str = "5m"
    scheduler_type: str = "fair_share"
    preemption_enabled: bool = False
    db_tier: str = "db-custom-1-3840"
    db_edition: str | None = None
    bucket_versioning: bool = False
    filestore: bool = False
    filestore_address: str | None = None
    boot: BootOptions = dataclasses.field(default_factory=BootOptions)
    """Which det the VMs install and the master's TLS material (``common.boot``)."""
    registry: RegistryAuth | None = None
    """A private registry for task images (``--registry-*``; its password is in the secret)."""
    labels: tuple[tuple[str, str], ...] = ()
    cpu_env_image: str = DEFAULT_CPU_ENV_IMAGE
    gpu_env_image: str = DEFAULT_GPU_ENV_IMAGE
    master: str = VM
    """``vm`` (a VM runs the master) or ``serverless`` (Cloud Run: ``gcp/serverless.py``). The CLI's
    choice for a new cluster is ``serverless.DEFAULT_MASTER``; this default is the program's."""
    rollout: Rollout | None = None
    """Serverless: the images of this pass of ``up`` (None: the release everywhere, dry-run)."""
    mirror_images: bool = False
    """``--mirror-images``: the task images in the cluster's Artifact Registry (``common.mirror``,
    ``gcp/image_mirror.py``); the pools' defaults point there."""
    checkpoint_gc_image: str | None = None
    """``--checkpoint-gc-image``: the image of checkpoint-GC tasks (``common.gc_image``); None:
    det's own (built and mirrored) with ``--mirror-images``, else the task image."""

    @property
    def source_env_images(self) -> tuple[str, str]:
        """The task images ``(cpu, cuda)`` as given (flags or Determined's defaults)."""
        return self.cpu_env_image, self.gpu_env_image

    @property
    def mirror_prefix(self) -> str:
        """The image path prefix of the mirror (``<region>-docker.pkg.dev/<project>/<repo>``)."""
        return f"{self.region}-docker.pkg.dev/{self.project_id}/det-{self.cluster_id}-mirror"

    @property
    def mirror_target(self) -> str | None:
        return self.mirror_prefix if self.mirror_images else None

    @property
    def serverless(self) -> bool:
        return self.master == SERVERLESS

    @property
    def zone_name(self) -> str:
        return self.zone or f"{self.region}-b"

    @property
    def sql_edition(self) -> str:
        return catalog.check_sql_edition(self.db_tier, self.db_edition)

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def network_name(self) -> str:
        return self.network or f"det-{self.cluster_id}"

    @property
    def subnetwork_name(self) -> str:
        return self.subnetwork or self.network_name

    @property
    def all_labels(self) -> dict[str, str]:
        return {**dict(self.labels), CLUSTER_LABEL: self.cluster_id, "managed-by": "det"}

    def validate(self) -> None:
        if self.master not in MASTER_KINDS:
            raise DeployError(
                f"--master must be one of {', '.join(MASTER_KINDS)}, not {self.master!r}"
            )
        if not CLUSTER_ID_RE.match(self.cluster_id):
            raise DeployError(
                "--cluster-id must start with a lower-case letter and contain only lower-case "
                "letters, digits and '-', not end with '-' (max 35)"
            )
        if limits.looks_like_google(self.cluster_id):
            raise DeployError(
                f"--cluster-id {self.cluster_id!r}: Cloud Storage refuses bucket names containing "
                "'google' (or a look-alike such as 'g00gle'), and the id names the bucket"
            )
        room = limits.GCP_MAX_LABELS - limits.GCP_OWN_LABELS
        if len(self.labels) > room:
            raise DeployError(f"--add-label: at most {room} labels (GCP allows 64 per resource)")
        for key, value in self.labels:
            if problem := limits.gcp_label(key, value):
                raise DeployError(f"--add-label: {problem}")
        if self.min_dynamic_agents < 0 or self.max_dynamic_agents < self.min_dynamic_agents:
            raise DeployError("--max-dynamic-agents must be >= --min-dynamic-agents >= 0")
        if self.existing_network and not self.network:
            raise DeployError("--existing-network needs --network")
        if self.subnetwork and not self.existing_network:
            raise DeployError("--subnetwork is only used with --existing-network")
        if self.filestore and self.filestore_address:
            raise DeployError("use either --filestore or --filestore-address, not both")
        if self.preemption_enabled and self.scheduler_type != "priority":
            raise DeployError(
                "--preemption-enabled is only supported with --scheduler-type priority"
            )
        catalog.check_region(self.region)
        if self.zone:
            catalog.check_zone(self.zone, self.region)
        for flag, machine_type in (
            ("--master-instance-type", self.master_instance_type),
            ("--aux-agent-instance-type", self.aux_agent_instance_type),
            ("--compute-agent-instance-type", self.compute_agent_instance_type),
        ):
            catalog.check_machine_type(flag, machine_type)
        catalog.check_gpu(self.gpu_type, self.gpu_num, self.compute_agent_instance_type)
        catalog.check_sql_edition(self.db_tier, self.db_edition)
        gc_image.check_flag(self.checkpoint_gc_image)
        reserved = {CLUSTER_LABEL, "managed-by"} & {k for k, _ in self.labels}
        if reserved:
            raise DeployError(f"labels {sorted(reserved)} are reserved")
