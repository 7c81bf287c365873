"""The AWS cluster program: reads an :class:`AwsConfig`, wires the components, returns outputs.

``build`` is the Pulumi program body; the Automation API runs it for ``up`` and the dry-run
renders it under mocks. It calls ``aws.get_availability_zones`` (new VPC) and, when the images
are not pinned yet (the dry-run), ``aws.ssm.get_parameter`` for the public image parameters;
:data:`MOCK_CALLS` answers those offline. ``up`` always passes pinned images
(``commands.pin_images``), so a later ``up`` never picks a newer image by itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_aws as aws

from det.deploy.aws import iam, image_mirror, logs, master, network, serverless, storage
from det.deploy.aws.config import (
    DLAMI_SSM_PARAMETER,
    UBUNTU_SSM_PARAMETER,
    AwsConfig,
)
from det.deploy.common import dryrun, masteryaml, passwords


def _ssm_image(parameter: str) -> pulumi.Output[str]:
    return aws.ssm.get_parameter_output(name=parameter).insecure_value


def images(cfg: AwsConfig) -> dict[str, pulumi.Output[str]]:
    """AMI ids by role (``master``, ``aux_agent``, ``compute_agent``): pinned, or looked up."""
    if cfg.images:
        found = {k: pulumi.Output.from_input(v) for k, v in cfg.images.as_dict().items()}
    else:
        ubuntu = _ssm_image(UBUNTU_SSM_PARAMETER)
        found = {
            "master": ubuntu,
            "aux_agent": ubuntu,
            "compute_agent": _ssm_image(DLAMI_SSM_PARAMETER),
        }
    if cfg.agent_image_id:
        found["aux_agent"] = found["compute_agent"] = pulumi.Output.from_input(cfg.agent_image_id)
    if cfg.master_image_id:
        found["master"] = pulumi.Output.from_input(cfg.master_image_id)
    return found


def _secret(
    name: str,
    cfg: AwsConfig,
    initial_user_password: pulumi.Input[str] | None,
    registry_password: pulumi.Input[str] | None,
) -> storage.ClusterSecret:
    return storage.ClusterSecret(
        f"{name}-secret",
        storage.ClusterSecretArgs(
            tags=cfg.tags, **passwords.contents(cfg, initial_user_password, registry_password)
        ),
    )


def _iam(
    name: str,
    cfg: AwsConfig,
    bucket: storage.CheckpointBucket,
    agent_subnet: pulumi.Output[str],
    sgs: network.SecurityGroups,
    secret: storage.ClusterSecret,
) -> iam.Iam:
    return iam.Iam(
        name,
        iam.IamArgs(
            cluster_id=cfg.cluster_id,
            region=cfg.region,
            keypair=cfg.keypair,
            bucket_arn=bucket.arn,
            agent_subnet_arn=agent_subnet.apply(lambda s: f"arn:aws:ec2:{cfg.region}:*:subnet/{s}"),
            agent_sg_arn=sgs.agent_sg_id.apply(
                lambda s: f"arn:aws:ec2:{cfg.region}:*:security-group/{s}"
            ),
            secret_arn=secret.arn,
            log_group_name=cfg.log_group_name,
            spot_service_role=cfg.spot and cfg.create_spot_service_role,
            tags=cfg.tags,
        ),
    )


def _database(
    name: str,
    cfg: AwsConfig,
    net: network.Network,
    sgs: network.SecurityGroups,
    secret: storage.ClusterSecret,
) -> storage.Database:
    return storage.Database(
        f"{name}-db",
        storage.DatabaseArgs(
            private_subnet_ids=net.private_subnet_ids,
            security_group_id=sgs.db_sg_id,
            password=secret.db_password,
            tags=cfg.tags,
            instance_class=cfg.db_instance_type,
            allocated_storage=cfg.db_size,
            final_snapshot_prefix=f"{name}-final",
        ),
    )


def _master_config(
    cfg: AwsConfig,
    bucket: storage.CheckpointBucket,
    db: storage.Database,
    amis: Mapping[str, pulumi.Output[str]],
    agent_subnet: pulumi.Output[str],
    sgs: network.SecurityGroups,
    roles: iam.Iam,
) -> pulumi.Output[masteryaml.MasterConfig]:
    """master.yaml (as a document) once the resources it names exist."""
    return pulumi.Output.all(
        bucket=bucket.bucket,
        db_host=db.address,
        db_port=db.port,
        agent_image_id=amis["aux_agent"],
        compute_image_id=amis["compute_agent"],
        agent_subnet_id=agent_subnet,
        agent_sg_id=sgs.agent_sg_id,
        agent_profile_arn=roles.agent_profile_arn,
    ).apply(lambda v: master.master_yaml_config(cfg, master.Resolved(**v)))


def build(
    cfg: AwsConfig,
    initial_user_password: pulumi.Input[str] | None = None,
    registry_password: pulumi.Input[str] | None = None,
) -> dict[str, pulumi.Output[Any]]:
    if cfg.serverless:
        return serverless.build(cfg, images(cfg), initial_user_password, registry_password)
    name = f"det-{cfg.cluster_id}"
    tags = cfg.tags
    net = network.for_cluster(name, cfg)
    sgs = network.SecurityGroups(
        name,
        network.SecurityGroupsArgs(
            vpc_id=net.vpc_id,
            inbound_cidr=cfg.inbound_cidr,
            port=cfg.port,
            enable_ssh=cfg.enable_ssh,
            tags=tags,
        ),
    )
    bucket = storage.checkpoint_bucket(name, cfg)
    secret = _secret(name, cfg, initial_user_password, registry_password)
    agent_subnet = (
        pulumi.Output.from_input(cfg.agent_subnet_id)
        if cfg.agent_subnet_id
        else net.public_subnet_ids[0]
    )
    log_group = logs.BootLogs(
        f"{name}-logs",
        logs.BootLogsArgs(
            name=cfg.log_group_name, retention_days=cfg.log_retention_days, tags=tags
        ),
    )
    roles = _iam(name, cfg, bucket, agent_subnet, sgs, secret)
    db = _database(name, cfg, net, sgs, secret)
    amis = images(cfg)
    master_config = _master_config(cfg, bucket, db, amis, agent_subnet, sgs, roles)
    master_yaml = master_config.apply(masteryaml.render)
    node = master.Master(
        f"{name}-master",
        master.MasterArgs(
            config=cfg,
            image_id=amis["master"],
            subnet_id=net.public_subnet_ids[0],
            security_group_id=sgs.master_sg_id,
            instance_profile=roles.master_profile_name,
            master_yaml=master_yaml,
            secret_arn=secret.arn,
            tags=tags,
            log_group=log_group.name,
            bucket=bucket.bucket,
        ),
    )
    mirrors = image_mirror.repositories(name, cfg, roles.agent_role_arn)
    return {
        **mirrors,
        "cluster_id": pulumi.Output.from_input(cfg.cluster_id),
        "region": pulumi.Output.from_input(cfg.region),
        "master_url": node.public_ip.apply(lambda ip: f"{cfg.scheme}://{ip}:{cfg.port}"),
        "master_instance_id": node.instance_id,
        "master_public_ip": node.public_ip,
        "bucket": bucket.bucket,
        "db_endpoint": pulumi.Output.all(db.address, db.port).apply(lambda v: f"{v[0]}:{v[1]}"),
        "vpc_id": net.vpc_id,
        # A new VPC's zones: the next `up` passes them again (commands.pinned_zones).
        "zones": pulumi.Output.all(*net.zones),
        "agent_security_group_id": sgs.agent_sg_id,
        "agent_instance_profile_arn": roles.agent_profile_arn,
        "secret_arn": secret.arn,
        "initial_user_password": secret.initial_user_password,
        "master_yaml": master_yaml,
        "images": pulumi.Output.all(**amis),
        "log_group": log_group.name,
        "db_final_snapshot": db.final_snapshot_identifier,
        "config_hash": master_config.apply(master.agent_config_hash),
    }


MOCK_AMIS = {
    UBUNTU_SSM_PARAMETER: "ami-0123456789abcdef0",
    DLAMI_SSM_PARAMETER: "ami-0fedcba9876543210",
}
MOCK_CALLS: dict[str, dryrun.MockCall] = {
    "aws:index/getAvailabilityZones:getAvailabilityZones": lambda a: {
        "names": ["us-west-2a", "us-west-2b", "us-west-2c"],
        "zoneIds": ["usw2-az1", "usw2-az2", "usw2-az3"],
    },
    "aws:ssm/getParameter:getParameter": lambda a: {
        "name": a["name"],
        "type": "String",
        "insecureValue": MOCK_AMIS[str(a["name"])],
        "value": MOCK_AMIS[str(a["name"])],
    },
    "aws:ec2/getManagedPrefixList:getManagedPrefixList": lambda a: {
        "id": "pl-82a045eb",
        "name": a.get("name"),
    },
}
