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
from collections.abc import Mapping
from typing import Any

import yaml

from det.deploy.common.tls import CERT_NAME, MASTER_CERT_PATH, MASTER_KEY_PATH

LOCAL_IP_PLACEHOLDER = "__DET_MASTER_PRIVATE_IP__"
AUX_POOL = "aux-pool"
COMPUTE_POOL = "compute-pool"
# Determined 0.38.1's default task images (master/pkg/schemas/expconf/const.go at v0.38.1:
# CPUImage and CUDAImage), public on Docker Hub; both clouds' deploys and the agent image use them.
DEFAULT_CPU_ENV_IMAGE = "determinedai/pytorch-ngc:0.38.1"
DEFAULT_GPU_ENV_IMAGE = "determinedai/pytorch-ngc:0.38.1"


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
    instance_type: Any
    max_aux_containers_per_agent: int
    cpu_slots_allowed: bool = False


@dataclasses.dataclass(frozen=True)
class MasterYamlSpec:
    cluster_name: str
    port: int
    db: DbSpec
    checkpoint_storage: dict[str, Any]
    # The cloud ``provider`` block shared by both pools (everything but the instance type).
    provider: dict[str, Any]
    pools: tuple[PoolSpec, ...]
    scheduler_type: str = "fair_share"
    preemption: bool = False
    task_container_defaults: dict[str, Any] | None = None
    tls: bool = False
    """Serve HTTPS from the certificate the boot script writes (``security.tls``); agents
    verify it by name (``master_cert_name``)."""
    agent_install: dict[str, str] | None = None
    """How agents install det (provider key ``agent_install``: ``wheel_url``, ``wheel_sha256``,
    ``constraints_url``, ``package_index``, ``extras``)."""
    registry_auth: dict[str, str] | None = None
    """``task_container_defaults.registry_auth`` without its password (the master reads that
    from its environment: ``common.registry``)."""


def checkpoint_storage(storage_type: str, bucket: str) -> dict[str, Any]:
    """The cluster's bucket as master.yaml's ``checkpoint_storage`` (``s3`` or ``gcs``), with
    det's retention: the best and the latest checkpoint of each trial."""
    return {
        "type": storage_type,
        "bucket": bucket,
        "save_experiment_best": 0,
        "save_trial_best": 1,
        "save_trial_latest": 1,
    }


def task_images(env_images: tuple[str, str], gc_image: str | None) -> dict[str, Any]:
    """``task_container_defaults``' images: the (CPU, CUDA) task images, and checkpoint GC's
    own image when one is set (``common.gc_image``: every pool's GC, not the task image)."""
    cpu_image, cuda_image = env_images
    tcd: dict[str, Any] = {"image": {"cpu": cpu_image, "cuda": cuda_image}}
    if gc_image:
        tcd["checkpoint_gc_image"] = gc_image
    return tcd


def task_port(port: int) -> int:
    """A VM master's task origin (docs/security.md): its second listener, which serves only the
    task proxy, one port above the API's. The firewall opens both to the same addresses."""
    return port + 1


def master_url(port: int, tls: bool = False) -> str:
    return f"{'https' if tls else 'http'}://{LOCAL_IP_PLACEHOLDER}:{port}"


def master_config(spec: MasterYamlSpec) -> dict[str, Any]:
    pools = []
    shared = dict(spec.provider)
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
    config: dict[str, Any] = {
        "cluster_name": spec.cluster_name,
        "port": spec.port,
        "master_url": master_url(spec.port, spec.tls),
        "task_port": task_port(spec.port),
        "data_dir": "/var/lib/det/master",
        "db": dataclasses.asdict(spec.db),
        "checkpoint_storage": dict(spec.checkpoint_storage),
        "resource_manager": {
            "type": "agent",
            "default_aux_resource_pool": AUX_POOL if AUX_POOL in names else names[0],
            "default_compute_resource_pool": COMPUTE_POOL if COMPUTE_POOL in names else names[0],
            "scheduler": {"type": spec.scheduler_type, "preemption": spec.preemption},
        },
        "resource_pools": pools,
    }
    if spec.tls:
        config["security"] = {"tls": {"cert": MASTER_CERT_PATH, "key": MASTER_KEY_PATH}}
    tcd = dict(spec.task_container_defaults or {})
    if spec.registry_auth:
        tcd["registry_auth"] = dict(spec.registry_auth)
    if tcd:
        config["task_container_defaults"] = tcd
    config["task_container_policy"] = task_container_policy(tcd)
    return config


def task_container_policy(tcd: Mapping[str, Any]) -> dict[str, Any]:
    """A cloud cluster's policy for non-admins' tasks: only the data paths the deploy set up
    (its task_container_defaults' mounts), no added capability, no host device (the slots' GPUs
    come with the allocation, not as devices)."""
    paths = [m["host_path"] for m in tcd.get("bind_mounts") or [] if isinstance(m, dict)]
    return {
        "bind_mounts": [{"host_path": p} for p in paths],
        "add_capabilities": [],
        "devices": [],
    }


def render(config: dict[str, Any]) -> str:
    return yaml.safe_dump(config, sort_keys=False, default_flow_style=False)


def standard_pools(
    aux_instance_type: Any, compute_instance_type: Any, max_aux_containers_per_agent: int
) -> tuple[PoolSpec, ...]:
    """Determined's two pools: CPU tasks on ``aux-pool``, trials on ``compute-pool``."""
    return (
        PoolSpec(AUX_POOL, aux_instance_type, max_aux_containers_per_agent),
        PoolSpec(COMPUTE_POOL, compute_instance_type, 0, cpu_slots_allowed=True),
    )


def config_hash(config: Mapping[str, Any], cert_pem: str | None = None) -> str:
    """A short digest of a master.yaml document (before the hash tag or label is added to it)
    and of the master's certificate (``cert_pem``): agents carry the digest of the config they
    were launched for, so ``up`` can tell which agents an older config (or a certificate that
    was renewed since, which they trust alone) launched. The digest is in master.yaml, so a new
    certificate also changes the master's user data: the master restarts and loads it."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    if cert_pem:
        text += "\n" + cert_pem.strip()
    return hashlib.sha256(text.encode()).hexdigest()[:16]
