"""Settings of one GCP cluster, from ``det deploy gcp up`` flags (defaults follow Determined)."""

from __future__ import annotations

import dataclasses
import re

from det.deploy.common.errors import DeployError

PROJECT = "det-gcp"
# Every VM of the cluster carries this label with the cluster id.
CLUSTER_LABEL = "det-cluster"
# GCE names and label values: lower case, digits, '-'; Determined allows 35 characters.
CLUSTER_ID_RE = re.compile(r"^[a-z][-a-z0-9]{0,34}$")
UBUNTU_IMAGE = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)


@dataclasses.dataclass(frozen=True)
class GcpConfig:
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
    port: int = 8080
    master_instance_type: str = "n1-standard-2"
    aux_agent_instance_type: str = "n1-standard-4"
    compute_agent_instance_type: str = "n1-standard-32"
    gpu_type: str = "nvidia-tesla-t4"
    gpu_num: int = 4
    preemptible: bool = False
    agent_image: str = UBUNTU_IMAGE
    disk_size: int = 200
    disk_type: str = "pd-standard"
    min_dynamic_agents: int = 0
    max_dynamic_agents: int = 5
    max_aux_containers_per_agent: int = 16
    max_idle_agent_period: str = "10m"
    max_agent_starting_period: str = "20m"
    operation_timeout_period: str = "5m"
    scheduler_type: str = "fair_share"
    preemption_enabled: bool = False
    db_tier: str = "db-custom-1-3840"
    bucket_versioning: bool = False
    filestore: bool = False
    filestore_address: str | None = None
    det_package: str = "det[master,gcp]"
    labels: tuple[tuple[str, str], ...] = ()
    cpu_env_image: str | None = None
    gpu_env_image: str | None = None

    @property
    def zone_name(self) -> str:
        return self.zone or f"{self.region}-b"

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
        if not CLUSTER_ID_RE.match(self.cluster_id):
            raise DeployError(
                "--cluster-id must start with a lower-case letter and contain only lower-case "
                "letters, digits and '-' (max 35)"
            )
        if self.min_dynamic_agents < 0 or self.max_dynamic_agents < self.min_dynamic_agents:
            raise DeployError("--max-dynamic-agents must be >= --min-dynamic-agents >= 0")
        if self.existing_network and not self.network:
            raise DeployError("--existing-network needs --network")
        if self.subnetwork and not self.existing_network:
            raise DeployError("--subnetwork is only used with --existing-network")
        if self.filestore and self.filestore_address:
            raise DeployError("use either --filestore or --filestore-address, not both")
        if bool(self.cpu_env_image) != bool(self.gpu_env_image):
            raise DeployError("if a CPU or GPU environment image is specified, both should be")
        if self.preemption_enabled and self.scheduler_type != "priority":
            raise DeployError(
                "--preemption-enabled is only supported with --scheduler-type priority"
            )
        reserved = {CLUSTER_LABEL, "managed-by"} & {k for k, _ in self.labels}
        if reserved:
            raise DeployError(f"labels {sorted(reserved)} are reserved")
