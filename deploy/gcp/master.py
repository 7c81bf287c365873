"""The master VM of a GCP cluster and the master.yaml it runs with."""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any

import pulumi
import pulumi_gcp as gcp

from det.deploy.common import boot, masteryaml, uploads, userdata
from det.deploy.common.boot import BootOptions
from det.deploy.gcp.config import (
    BOOT_LOG_NAME,
    CLUSTER_LABEL,
    CONFIG_HASH_LABEL,
    MASTER_DISK_GB,
    SCOPES,
    GcpConfig,
)

_METADATA = "http://metadata.google.internal/computeMetadata/v1"
# GCE_METADATA_HOST: only set where the boot runs against a fake metadata server (tests).
_LOCAL_IP = (
    'curl -sf -H "Metadata-Flavor: Google" '
    "http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1/instance/network-interfaces/0/ip"
)
SHARED_FS_HOST_PATH = "/mnt/det-shared"


@dataclasses.dataclass(frozen=True)
class Resolved:
    bucket: str
    db_host: str
    agent_email: str
    network_id: str
    subnetwork_id: str
    filestore_address: str | None = None


def _provider(cfg: GcpConfig, r: Resolved, agent_tag: str) -> masteryaml.Provider:
    """The provider block both pools share (each pool sets its boot image after)."""
    provider: masteryaml.Provider = {
        "type": "gcp",
        "master_url": masteryaml.master_url(cfg.port),
        "project": cfg.project_id,
        "zone": cfg.zone_name,
        "boot_disk_size": cfg.disk_size,
        "boot_disk_type": cfg.disk_type,
        "boot_disk_source_image": cfg.agent_image,
        "label_key": CLUSTER_LABEL,
        "label_value": cfg.cluster_id,
        "name_prefix": f"det-agent-{cfg.cluster_id}-",
        "network_interface": {
            "network": r.network_id,
            "subnetwork": r.subnetwork_id,
            "external_ip": True,
        },
        "network_tags": [agent_tag],
        "service_account": {"email": r.agent_email, "scopes": list(SCOPES)},
        "min_instances": cfg.min_dynamic_agents,
        "max_instances": cfg.max_dynamic_agents,
        "max_idle_agent_period": cfg.max_idle_agent_period,
        "max_agent_starting_period": cfg.max_agent_starting_period,
        "operation_timeout_period": cfg.operation_timeout_period,
    }
    if r.filestore_address:
        provider["startup_script"] = (
            "apt-get install -y nfs-common && "
            f"mkdir -p {SHARED_FS_HOST_PATH} && mount {shlex.quote(r.filestore_address)} {SHARED_FS_HOST_PATH}"
        )
    return provider


def _task_container_defaults(cfg: GcpConfig, r: Resolved) -> masteryaml.TaskContainerDefaults:
    """The task images, and the Filestore share bind-mounted into every task when there is one."""
    tcd: masteryaml.TaskContainerDefaults = {}
    if r.filestore_address:
        tcd["bind_mounts"] = [
            {
                "host_path": SHARED_FS_HOST_PATH,
                "container_path": "/run/determined/workdir/shared_fs",
            }
        ]
    # After the mounts, as master.yaml has always listed them (its text is in the user data).
    tcd.update(masteryaml.task_images(cfg.env_images, cfg.gc_image))
    return tcd


def master_yaml_config(
    cfg: GcpConfig, r: Resolved, master_tag: str, agent_tag: str
) -> masteryaml.MasterConfig:
    aux: masteryaml.GceInstanceType = {
        "machine_type": cfg.aux_agent_instance_type,
        "gpu_type": "",
        "gpu_num": 0,
        "preemptible": False,
    }
    compute: masteryaml.GceInstanceType = {
        "machine_type": cfg.compute_agent_instance_type,
        "gpu_type": cfg.gpu_type,
        "gpu_num": cfg.gpu_num,
        "preemptible": cfg.preemptible,
    }
    spec = masteryaml.MasterYamlSpec(
        cluster_name=cfg.cluster_id,
        port=cfg.port,
        db=masteryaml.DbSpec(host=r.db_host, user="det"),
        checkpoint_storage=masteryaml.checkpoint_storage("gcs", r.bucket),
        provider=_provider(cfg, r, agent_tag),
        pools=masteryaml.standard_pools(aux, compute, cfg.max_aux_containers_per_agent),
        scheduler_type=cfg.scheduler_type,
        preemption=cfg.preemption_enabled,
        task_container_defaults=_task_container_defaults(cfg, r),
        tls=cfg.tls,
        registry_auth=cfg.registry.registry_auth() if cfg.registry else None,
        agent_install=boot.agent_install(cfg.boot, "gs", r.bucket, "agent,gcp", BOOT_LOG_NAME),
    )
    config = masteryaml.master_config(spec)
    # Per-pool boot images: CPU agents run Ubuntu, GPU agents the Deep Learning VM image (the
    # shared provider block carries the GPU one).
    images = {masteryaml.AUX_POOL: cfg.aux_agent_image, masteryaml.COMPUTE_POOL: cfg.agent_image}
    for pool in config["resource_pools"]:
        if pool["pool_name"] in images:
            pool["provider"]["boot_disk_source_image"] = images[pool["pool_name"]]
    material = cfg.boot.tls_material() if cfg.tls else None
    digest = masteryaml.config_hash(config, material.cert_pem if material else None)
    for pool in config["resource_pools"]:
        pool["provider"]["labels"] = {
            **pool["provider"].get("labels", {}),
            CONFIG_HASH_LABEL: digest,
        }
    return config


def agent_config_hash(config: masteryaml.MasterConfig) -> str:
    """The label :func:`master_yaml_config` put on the agents of ``config``."""
    return config["resource_pools"][0]["provider"].get("labels", {})[CONFIG_HASH_LABEL]


def fetch_secret_command(secret_path: str) -> str:
    """Reads the secret with the VM's own token (stdlib only: no SDK needed at boot)."""
    code = (
        "import base64,json,os,sys,urllib.request as u\n"
        "m=os.environ.get('GCE_METADATA_HOST','metadata.google.internal')\n"
        "t=json.load(u.urlopen(u.Request('http://'+m+'/computeMetadata/v1/instance/service-accounts/default/token',"
        "headers={'Metadata-Flavor':'Google'})))['access_token']\n"
        "e=os.environ.get('DET_SECRETMANAGER_ENDPOINT','https://secretmanager.googleapis.com')\n"
        "r=u.Request(e+'/v1/'+sys.argv[1]+'/versions/latest:access',"
        "headers={'Authorization':'Bearer '+t})\n"
        "sys.stdout.write(base64.b64decode(json.load(u.urlopen(r))['payload']['data']).decode())"
    )
    return f"/opt/det/bin/python3 -c {shlex.quote(code)} {shlex.quote(secret_path)}"


def startup_script(cfg: GcpConfig, master_yaml: str, secret_path: str, bucket: str) -> str:
    """The master's startup script (the guest agent runs it at every boot)."""
    wheel, sha, constraints = boot.wheel_location(cfg.boot, "gs", bucket)
    return userdata.render_master_boot(
        userdata.MasterBoot(
            cloud="gcp",
            master_yaml=master_yaml,
            local_ip=_LOCAL_IP,
            fetch_secret=fetch_secret_command(secret_path),
            wheel_url=wheel,
            wheel_sha256=sha,
            constraints_url=constraints,
            extras="master,gcp",
            package_index=cfg.boot.package_index,
            tls=cfg.tls,
            log_target=BOOT_LOG_NAME,
            gcp_project=cfg.project_id,
        )
    )


def release_objects(
    name: str, opts: BootOptions, bucket: pulumi.Input[str] | None, child: pulumi.ResourceOptions
) -> list[pulumi.Output[str]]:
    """det's wheel and constraints as objects of the bucket (none with ``--det-wheel-url``)."""
    if bucket is None:
        return []

    def put(resource_name: str, key: str, **kwargs: Any) -> pulumi.CustomResource:
        return gcp.storage.BucketObject(
            resource_name, bucket=bucket, name=key, opts=child, **kwargs
        )

    return uploads.release_objects(name, opts, put)


@dataclasses.dataclass
class MasterArgs:
    config: GcpConfig
    subnetwork_id: pulumi.Input[str]
    service_account_email: pulumi.Input[str]
    master_yaml: pulumi.Input[str]
    secret_path: str
    master_tag: str
    bucket: pulumi.Input[str] | None = None
    """The cluster's bucket: det's wheel and constraints are uploaded there for the VMs."""


class Master(pulumi.ComponentResource):
    public_ip: pulumi.Output[str]
    instance_name: pulumi.Output[str]

    def __init__(self, name: str, args: MasterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("det:gcp:Master", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cfg = args.config
        address = gcp.compute.Address(
            name, project=cfg.project_id, region=cfg.region, address_type="EXTERNAL", opts=child
        )
        uploads = release_objects(name, cfg.boot, args.bucket, child)
        script = pulumi.Output.all(args.master_yaml, args.bucket, *uploads).apply(
            lambda v: startup_script(cfg, v[0], args.secret_path, v[1] or "")
        )
        instance = gcp.compute.Instance(
            name,
            name=name,
            project=cfg.project_id,
            zone=cfg.zone_name,
            machine_type=cfg.master_instance_type,
            boot_disk=gcp.compute.InstanceBootDiskArgs(
                initialize_params=gcp.compute.InstanceBootDiskInitializeParamsArgs(
                    image=cfg.master_image, size=MASTER_DISK_GB, type="pd-balanced"
                )
            ),
            network_interfaces=[
                gcp.compute.InstanceNetworkInterfaceArgs(
                    subnetwork=args.subnetwork_id,
                    access_configs=[
                        gcp.compute.InstanceNetworkInterfaceAccessConfigArgs(nat_ip=address.address)
                    ],
                )
            ],
            service_account=gcp.compute.InstanceServiceAccountArgs(
                email=args.service_account_email, scopes=list(SCOPES)
            ),
            tags=[args.master_tag],
            labels={**cfg.all_labels, "det-role": "master"},
            metadata_startup_script=script,
            shielded_instance_config=gcp.compute.InstanceShieldedInstanceConfigArgs(
                enable_secure_boot=True, enable_vtpm=True, enable_integrity_monitoring=True
            ),
            allow_stopping_for_update=True,
            # The start-up script carries the master's config: a change replaces the VM. The old
            # one goes first, as the new one takes its name and its static address.
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(delete_before_replace=True)
            ),
        )
        self.public_ip = address.address
        self.instance_name = instance.name
        self.register_outputs({"public_ip": address.address, "instance_name": instance.name})
