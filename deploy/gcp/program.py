"""The GCP cluster program: reads a :class:`GcpConfig`, wires the components, returns outputs.

With ``--existing-network`` it calls ``gcp.compute.get_subnetwork`` for the subnet's range;
:data:`MOCK_CALLS` answers it offline.
"""

from __future__ import annotations

from typing import Any

import pulumi

from det.deploy.common import dryrun, masteryaml, passwords
from det.deploy.gcp import iam, image_mirror, images, master, network, serverless, storage
from det.deploy.gcp.config import BOOT_LOG_NAME, GcpConfig


def _secret(
    name: str,
    cfg: GcpConfig,
    initial_user_password: pulumi.Input[str] | None,
    registry_password: pulumi.Input[str] | None,
) -> storage.ClusterSecret:
    return storage.ClusterSecret(
        f"{name}-secret",
        storage.ClusterSecretArgs(
            project=cfg.project_id,
            secret_id=f"{name}-secret",
            **passwords.contents(cfg, initial_user_password, registry_password),
        ),
    )


def _booted_images(cfg: GcpConfig) -> dict[str, str]:
    return {
        "master": cfg.master_image,
        "aux_agent": cfg.aux_agent_image,
        "compute_agent": cfg.agent_image,
    }


def _filestore(name: str, cfg: GcpConfig, net: network.Network) -> pulumi.Output[str | None]:
    """The share tasks mount: a new Filestore instance (``--filestore``), a given address, or
    none."""
    if not cfg.filestore:
        return pulumi.Output.from_input(cfg.filestore_address)
    fs = storage.Filestore(
        f"{name}-fs",
        storage.FilestoreArgs(project=cfg.project_id, zone=cfg.zone_name, network=net.network_name),
    )
    return fs.address


def build(
    cfg: GcpConfig,
    initial_user_password: pulumi.Input[str] | None = None,
    registry_password: pulumi.Input[str] | None = None,
) -> dict[str, pulumi.Output[Any]]:
    if cfg.serverless:
        return serverless.build(cfg, initial_user_password, registry_password)
    name = f"det-{cfg.cluster_id}"
    master_tag, agent_tag = f"{name}-master", f"{name}-agent"
    net = network.for_cluster(name, cfg, master_tag, agent_tag)
    bucket = storage.checkpoint_bucket(name, cfg)
    accounts = iam.ServiceAccounts(
        name,
        iam.ServiceAccountsArgs(
            project=cfg.project_id, cluster_id=cfg.cluster_id, bucket=bucket.name
        ),
    )
    secret = _secret(name, cfg, initial_user_password, registry_password)
    secret.grant_access(f"{name}-master-secret", accounts.master_member, cfg.project_id)
    db = storage.Database(
        f"{name}-db",
        storage.DatabaseArgs(
            project=cfg.project_id,
            region=cfg.region,
            network_id=net.network_id,
            password=secret.db_password,
            tier=cfg.db_tier,
            edition=cfg.sql_edition,
        ),
    )
    filestore = _filestore(name, cfg, net)
    master_config = pulumi.Output.all(
        bucket=bucket.name,
        db_host=db.host,
        agent_email=accounts.agent_email,
        network_id=net.network_id,
        subnetwork_id=net.subnetwork_id,
        filestore_address=filestore,
    ).apply(lambda v: master.master_yaml_config(cfg, master.Resolved(**v), master_tag, agent_tag))
    master_yaml = master_config.apply(masteryaml.render)
    node = master.Master(
        f"det-master-{cfg.cluster_id}",
        master.MasterArgs(
            config=cfg,
            subnetwork_id=net.subnetwork_id,
            service_account_email=accounts.master_email,
            master_yaml=master_yaml,
            secret_path=secret.resource_path,
            master_tag=master_tag,
            bucket=bucket.name,
        ),
    )
    mirrors = image_mirror.repositories(cfg, accounts.agent_email)
    return {
        **mirrors,
        "cluster_id": pulumi.Output.from_input(cfg.cluster_id),
        "project_id": pulumi.Output.from_input(cfg.project_id),
        "zone": pulumi.Output.from_input(cfg.zone_name),
        "master_url": node.public_ip.apply(lambda ip: f"{cfg.scheme}://{ip}:{cfg.port}"),
        "master_instance_name": node.instance_name,
        # The label on the agents this config launches: the next `up` replaces older ones.
        "config_hash": master_config.apply(master.agent_config_hash),
        "master_public_ip": node.public_ip,
        "bucket": bucket.name,
        "db_endpoint": db.host.apply(lambda h: f"{h}:5432"),
        "network": net.network_name,
        # What `down` needs to remove the private-services peering (only from a network it made).
        "network_created": pulumi.Output.from_input(not cfg.existing_network),
        "service_peering": db.peering,
        "boot_log_name": pulumi.Output.from_input(BOOT_LOG_NAME),
        # The images the VMs boot and what was asked for: the next `up` reuses them (images.pin).
        "images": pulumi.Output.from_input(_booted_images(cfg)),
        "image_sources": pulumi.Output.from_input(images.sources(cfg)),
        "agent_service_account": accounts.agent_email,
        "master_service_account": accounts.master_email,
        "filestore_address": filestore,
        "initial_user_password": secret.initial_user_password,
        "master_yaml": master_yaml,
    }


MOCK_CALLS: dict[str, dryrun.MockCall] = {
    "gcp:compute/getSubnetwork:getSubnetwork": lambda a: {
        "ipCidrRange": "10.20.0.0/16",
        "name": a.get("name"),
        "selfLink": f"https://www.googleapis.com/compute/v1/projects/{a.get('project')}/regions/{a.get('region')}/subnetworks/{a.get('name')}",
    },
    **serverless.MOCK_CALLS,
}
