"""The master VM of a GCP cluster and the master.yaml it runs with."""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any

import pulumi
import pulumi_gcp as gcp

from det.deploy.common import masteryaml, userdata
from det.deploy.gcp.config import CLUSTER_LABEL, SCOPES, UBUNTU_IMAGE, GcpConfig

_METADATA = "http://metadata.google.internal/computeMetadata/v1"
_LOCAL_IP = f'curl -sf -H "Metadata-Flavor: Google" {_METADATA}/instance/network-interfaces/0/ip'
SHARED_FS_HOST_PATH = "/mnt/det-shared"


@dataclasses.dataclass(frozen=True)
class Resolved:
    bucket: str
    db_host: str
    agent_email: str
    network_id: str
    subnetwork_id: str
    filestore_address: str | None = None


def master_yaml_config(
    cfg: GcpConfig, r: Resolved, master_tag: str, agent_tag: str
) -> dict[str, Any]:
    provider: dict[str, Any] = {
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
    tcd: dict[str, Any] = {}
    if r.filestore_address:
        provider["startup_script"] = (
            "apt-get install -y nfs-common && "
            f"mkdir -p {SHARED_FS_HOST_PATH} && mount {shlex.quote(r.filestore_address)} {SHARED_FS_HOST_PATH}"
        )
        tcd["bind_mounts"] = [
            {
                "host_path": SHARED_FS_HOST_PATH,
                "container_path": "/run/determined/workdir/shared_fs",
            }
        ]
    if cfg.cpu_env_image and cfg.gpu_env_image:
        tcd["image"] = {"cpu": cfg.cpu_env_image, "cuda": cfg.gpu_env_image}
    aux = {
        "machine_type": cfg.aux_agent_instance_type,
        "gpu_type": "",
        "gpu_num": 0,
        "preemptible": False,
    }
    compute = {
        "machine_type": cfg.compute_agent_instance_type,
        "gpu_type": cfg.gpu_type,
        "gpu_num": cfg.gpu_num,
        "preemptible": cfg.preemptible,
    }
    spec = masteryaml.MasterYamlSpec(
        cluster_name=cfg.cluster_id,
        port=cfg.port,
        db=masteryaml.DbSpec(host=r.db_host, user="det"),
        checkpoint_storage={
            "type": "gcs",
            "bucket": r.bucket,
            "save_experiment_best": 0,
            "save_trial_best": 1,
            "save_trial_latest": 1,
        },
        provider=provider,
        pools=masteryaml.standard_pools(aux, compute, cfg.max_aux_containers_per_agent),
        scheduler_type=cfg.scheduler_type,
        preemption=cfg.preemption_enabled,
        task_container_defaults=tcd or None,
    )
    config: dict[str, Any] = masteryaml.master_config(spec)
    return config


def fetch_secret_command(secret_path: str) -> str:
    """Reads the secret with the VM's own token (stdlib only: no SDK needed at boot)."""
    code = (
        "import base64,json,sys,urllib.request as u\n"
        f"t=json.load(u.urlopen(u.Request('{_METADATA}/instance/service-accounts/default/token',"
        "headers={'Metadata-Flavor':'Google'})))['access_token']\n"
        "r=u.Request('https://secretmanager.googleapis.com/v1/'+sys.argv[1]+'/versions/latest:access',"
        "headers={'Authorization':'Bearer '+t})\n"
        "sys.stdout.write(base64.b64decode(json.load(u.urlopen(r))['payload']['data']).decode())"
    )
    return f"/opt/det/bin/python3 -c {shlex.quote(code)} {shlex.quote(secret_path)}"


@dataclasses.dataclass
class MasterArgs:
    config: GcpConfig
    subnetwork_id: pulumi.Input[str]
    service_account_email: pulumi.Input[str]
    master_yaml: pulumi.Input[str]
    secret_path: str
    master_tag: str


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
        script = pulumi.Output.from_input(args.master_yaml).apply(
            lambda y: userdata.render_bootstrap(
                master_yaml=y,
                package=cfg.det_package,
                local_ip=_LOCAL_IP,
                fetch_secret=fetch_secret_command(args.secret_path),
            )
        )
        instance = gcp.compute.Instance(
            name,
            name=name,
            project=cfg.project_id,
            zone=cfg.zone_name,
            machine_type=cfg.master_instance_type,
            boot_disk=gcp.compute.InstanceBootDiskArgs(
                initialize_params=gcp.compute.InstanceBootDiskInitializeParamsArgs(
                    image=UBUNTU_IMAGE, size=100, type="pd-balanced"
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
            opts=child,
        )
        self.public_ip = address.address
        self.instance_name = instance.name
        self.register_outputs({"public_ip": address.address, "instance_name": instance.name})
