"""The master.yaml a cloud deploy writes onto its master machine (pure: no I/O, no SDKs).

Secrets never go into this file: the master reads ``DET_DB_PASSWORD``,
``DET_SECURITY_INITIAL_USER_PASSWORD`` (and a private registry's password) from an environment
file its bootstrap fetches from the cloud's secret store. The master's own private address is only known on the machine, so
the YAML carries :data:`LOCAL_IP_PLACEHOLDER`, which the bootstrap replaces at boot.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from typing import NotRequired, TypedDict

import yaml

from det.deploy.common.tls import CERT_NAME, MASTER_CERT_PATH, MASTER_KEY_PATH

LOCAL_IP_PLACEHOLDER = "__DET_MASTER_PRIVATE_IP__"
AUX_POOL = "aux-pool"
COMPUTE_POOL = "compute-pool"
# Determined 0.38.1's default task images (master/pkg/schemas/expconf/const.go at v0.38.1:
# CPUImage and CUDAImage), public on Docker Hub; both clouds' deploys and the agent image use them.
DEFAULT_CPU_ENV_IMAGE = "determinedai/pytorch-ngc:0.38.1"
DEFAULT_GPU_ENV_IMAGE = "determinedai/pytorch-ngc:0.38.1"


class GceInstanceType(TypedDict):
    """A GCP pool's ``instance_type`` (an AWS pool's is the EC2 type's name)."""

    machine_type: str
    gpu_type: str
    gpu_num: int
    preemptible: bool


class Tag(TypedDict):
    key: str
    value: str


class NetworkInterface(TypedDict, total=False):
    """The agents' network: AWS keys (``public_ip``, ``subnet_id``, ``security_group_id``) or
    GCP's (``network``, ``subnetwork``, ``external_ip``)."""

    public_ip: bool
    subnet_id: str
    security_group_id: str
    network: str
    subnetwork: str
    external_ip: bool


class ServiceAccount(TypedDict):
    email: str
    scopes: list[str]


class Provider(TypedDict, total=False):
    """A pool's ``provider`` block, the keys the master's AWS and GCP provisioners read (one
    block with a ``type``, as in Determined's master.yaml)."""

    type: str
    master_url: str
    master_cert_name: str
    agent_install: dict[str, str]
    instance_type: str | GceInstanceType
    cpu_slots_allowed: bool
    min_instances: int
    max_instances: int
    max_idle_agent_period: str
    max_agent_starting_period: str
    network_interface: NetworkInterface
    # AWS
    region: str
    image_id: str
    instance_name: str
    root_volume_size: int
    iam_instance_profile_arn: str
    tag_key: str
    tag_value: str
    custom_tags: list[Tag]
    spot: bool
    spot_max_price: str
    ssh_key_name: str
    # GCP
    project: str
    zone: str
    boot_disk_size: int
    boot_disk_type: str
    boot_disk_source_image: str
    label_key: str
    label_value: str
    labels: dict[str, str]
    name_prefix: str
    network_tags: list[str]
    service_account: ServiceAccount
    operation_timeout_period: str
    startup_script: str


class ResourcePool(TypedDict):
    pool_name: str
    max_aux_containers_per_agent: int
    provider: Provider


class Scheduler(TypedDict):
    type: str
    preemption: bool


class ResourceManager(TypedDict):
    type: str
    default_aux_resource_pool: str
    default_compute_resource_pool: str
    scheduler: Scheduler


class BindMount(TypedDict):
    host_path: str
    container_path: NotRequired[str]


class TaskContainerDefaults(TypedDict, total=False):
    image: dict[str, str]
    """``cpu`` and ``cuda`` task images."""
    checkpoint_gc_image: str
    bind_mounts: list[BindMount]
    registry_auth: dict[str, str]


class TaskContainerPolicy(TypedDict):
    bind_mounts: list[BindMount]
    add_capabilities: list[str]
    devices: list[str]


class CheckpointStorage(TypedDict):
    type: str
    bucket: str
    save_experiment_best: int
    save_trial_best: int
    save_trial_latest: int


class DbConfig(TypedDict):
    host: str
    port: int
    name: str
    user: str
    ssl_mode: str


class TlsFiles(TypedDict):
    cert: str
    key: str


class Security(TypedDict):
    tls: TlsFiles


class MasterConfig(TypedDict):
    """master.yaml as a document (the keys in the order the file lists them)."""

    cluster_name: str
    port: int
    master_url: str
    task_port: int
    data_dir: str
    db: DbConfig
    checkpoint_storage: CheckpointStorage
    resource_manager: ResourceManager
    resource_pools: list[ResourcePool]
    security: NotRequired[Security]
    task_container_defaults: NotRequired[TaskContainerDefaults]
    task_container_policy: NotRequired[TaskContainerPolicy]
    api_processes: NotRequired[int]
    # A serverless master's (``common.serverless.serverless_master_config``).
    task_origin: NotRequired[str]
    db_pool_size: NotRequired[int]


@dataclasses.dataclass(frozen=True)
class DbSpec:
    host: str
    port: int = 5432
    name: str = "determined"
    user: str = "postgres"
    ssl_mode: str = "require"


@dataclasses.dataclass(frozen=True)
class PoolSpec:
    """One resource pool; ``instance_type`` is a string (AWS) or a mapping (GCP)."""

    name: str
    instance_type: str | GceInstanceType
    max_aux_containers_per_agent: int
    cpu_slots_allowed: bool = False


@dataclasses.dataclass(frozen=True)
class MasterYamlSpec:
    cluster_name: str
    port: int
    db: DbSpec
    checkpoint_storage: CheckpointStorage
    # The cloud ``provider`` block shared by both pools (everything but the instance type).
    provider: Provider
    pools: tuple[PoolSpec, ...]
    scheduler_type: str = "fair_share"
    preemption: bool = False
    task_container_defaults: TaskContainerDefaults | None = None
    tls: bool = False
    """Serve HTTPS from the certificate the boot script writes (``security.tls``); agents
    verify it by name (``master_cert_name``)."""
    agent_install: dict[str, str] | None = None
    """How agents install det (provider key ``agent_install``: ``wheel_url``, ``wheel_sha256``,
    ``constraints_url``, ``package_index``, ``extras``)."""
    registry_auth: dict[str, str] | None = None
    """``task_container_defaults.registry_auth`` without its password (the master reads that
    from its environment: ``common.registry``)."""


def checkpoint_storage(storage_type: str, bucket: str) -> CheckpointStorage:
    """The cluster's bucket as master.yaml's ``checkpoint_storage`` (``s3`` or ``gcs``), with
    det's retention: the best and the latest checkpoint of each trial."""
    return {
        "type": storage_type,
        "bucket": bucket,
        "save_experiment_best": 0,
        "save_trial_best": 1,
        "save_trial_latest": 1,
    }


def task_images(env_images: tuple[str, str], gc_image: str | None) -> TaskContainerDefaults:
    """``task_container_defaults``' images: the (CPU, CUDA) task images, and checkpoint GC's
    own image when one is set (``common.gc_image``: every pool's GC, not the task image)."""
    cpu_image, cuda_image = env_images
    tcd: TaskContainerDefaults = {"image": {"cpu": cpu_image, "cuda": cuda_image}}
    if gc_image:
        tcd["checkpoint_gc_image"] = gc_image
    return tcd


def task_port(port: int) -> int:
    """A VM master's task origin (docs/security.md): its second listener, which serves only the
    task proxy, one port above the API's. The firewall opens both to the same addresses."""
    return port + 1


def master_url(port: int, tls: bool = False) -> str:
    return f"{'https' if tls else 'http'}://{LOCAL_IP_PLACEHOLDER}:{port}"


#: Front processes of a VM master (``api_processes``; the master's own default is 1). The
#: deploys' master machines have two vCPUs; there, under bench/scale.py's 300 agents x 600
#: trials, one front spent 0.69-0.76 cores and still held reports and heartbeats behind one
#: another for Python's interpreter lock (report p50 12-28 ms / p99 550-690 ms, heartbeat p50
#: 70-135 ms), two at the same CPU answered report p50 6 ms / p99 280 ms, heartbeat p50 7-13
#: ms (docs/deploy.md, Scale). The second front holds up to ``db_pool_size`` + 3 more
#: connections: 90 at most for the master, within the deploys' databases' limits.
VM_API_PROCESSES = 2


def master_config(spec: MasterYamlSpec) -> MasterConfig:
    pools: list[ResourcePool] = []
    shared = spec.provider.copy()
    if spec.tls:
        shared["master_url"] = master_url(spec.port, tls=True)
        shared["master_cert_name"] = CERT_NAME
    if spec.agent_install:
        shared["agent_install"] = dict(spec.agent_install)
    for pool in spec.pools:
        provider = copy.deepcopy(shared)
        provider["instance_type"] = pool.instance_type
        if pool.cpu_slots_allowed:
            provider["cpu_slots_allowed"] = True
        pools.append(
            {
                "pool_name": pool.name,
                "max_aux_containers_per_agent": pool.max_aux_containers_per_agent,
                "provider": provider,
            }
        )
    names = [p.name for p in spec.pools]
    config: MasterConfig = {
        "cluster_name": spec.cluster_name,
        "port": spec.port,
        "master_url": master_url(spec.port, spec.tls),
        "task_port": task_port(spec.port),
        "data_dir": "/var/lib/det/master",
        "db": {
            "host": spec.db.host,
            "port": spec.db.port,
            "name": spec.db.name,
            "user": spec.db.user,
            "ssl_mode": spec.db.ssl_mode,
        },
        "checkpoint_storage": spec.checkpoint_storage.copy(),
        "resource_manager": {
            "type": "agent",
            "default_aux_resource_pool": AUX_POOL if AUX_POOL in names else names[0],
            "default_compute_resource_pool": COMPUTE_POOL if COMPUTE_POOL in names else names[0],
            "scheduler": {"type": spec.scheduler_type, "preemption": spec.preemption},
        },
        "resource_pools": pools,
        "api_processes": VM_API_PROCESSES,
    }
    if spec.tls:
        config["security"] = {"tls": {"cert": MASTER_CERT_PATH, "key": MASTER_KEY_PATH}}
    tcd = (spec.task_container_defaults or {}).copy()
    if spec.registry_auth:
        tcd["registry_auth"] = dict(spec.registry_auth)
    if tcd:
        config["task_container_defaults"] = tcd
    config["task_container_policy"] = task_container_policy(tcd)
    return config


def task_container_policy(tcd: TaskContainerDefaults | None) -> TaskContainerPolicy:
    """A cloud cluster's policy for non-admins' tasks: only the data paths the deploy set up
    (its task_container_defaults' mounts), no added capability, no host device (the slots' GPUs
    come with the allocation, not as devices)."""
    paths = [m["host_path"] for m in (tcd or {}).get("bind_mounts") or []]
    return {
        "bind_mounts": [{"host_path": p} for p in paths],
        "add_capabilities": [],
        "devices": [],
    }


def render(config: MasterConfig) -> str:
    return yaml.safe_dump(config, sort_keys=False, default_flow_style=False)


def standard_pools(
    aux_instance_type: str | GceInstanceType,
    compute_instance_type: str | GceInstanceType,
    max_aux_containers_per_agent: int,
) -> tuple[PoolSpec, ...]:
    """Determined's two pools: CPU tasks on ``aux-pool``, trials on ``compute-pool``."""
    return (
        PoolSpec(AUX_POOL, aux_instance_type, max_aux_containers_per_agent),
        PoolSpec(COMPUTE_POOL, compute_instance_type, 0, cpu_slots_allowed=True),
    )


def config_hash(config: MasterConfig, cert_pem: str | None = None) -> str:
    """A short digest of a master.yaml document (before the hash tag or label is added to it)
    and of the master's certificate (``cert_pem``): agents carry the digest of the config they
    were launched for, so ``up`` can tell which agents an older config (or a certificate that
    was renewed since, which they trust alone) launched. The digest is in master.yaml, so a new
    certificate also changes the master's user data: the master restarts and loads it."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    if cert_pem:
        text += "\n" + cert_pem.strip()
    return hashlib.sha256(text.encode()).hexdigest()[:16]
