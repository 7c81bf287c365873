"""The master machine of an AWS cluster and the master.yaml it runs with."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_aws as aws

from det.deploy.aws.config import CLUSTER_TAG, CONFIG_HASH_TAG, AwsConfig
from det.deploy.common import boot, limits, masteryaml, uploads, userdata
from det.deploy.common.boot import BootOptions
from det.deploy.common.errors import DeployError

# DET_IMDS_URL: only set where the boot runs against a fake metadata service (tests).
_IMDS = "${DET_IMDS_URL:-http://169.254.169.254}"
_IMDS_IP = (
    f'curl -sf -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: 60" {_IMDS}/latest/api/token'
    f' | xargs -I{{}} curl -sf -H "X-aws-ec2-metadata-token: {{}}" {_IMDS}/latest/meta-data/local-ipv4'
)


# The master's root volume (gp3, encrypted); preflight checks its image fits (check_master_image).
MASTER_VOLUME_GIB = 100


@dataclasses.dataclass(frozen=True)
class Resolved:
    """Values only known once the other components exist."""

    bucket: str
    db_host: str
    db_port: int
    agent_image_id: str
    agent_subnet_id: str
    agent_sg_id: str
    agent_profile_arn: str
    compute_image_id: str | None = None
    """The compute (GPU) pool's AMI; None: ``agent_image_id`` for both pools."""


def agent_config_hash(config: masteryaml.MasterConfig) -> str:
    """The hash tag :func:`master_yaml_config` put on the agents of ``config``."""
    tags = config["resource_pools"][0]["provider"].get("custom_tags", [])
    return str(next(t["value"] for t in tags if t["key"] == CONFIG_HASH_TAG))


def master_yaml_config(cfg: AwsConfig, r: Resolved) -> masteryaml.MasterConfig:
    """The master.yaml: the aux pool boots ``agent_image_id`` (Ubuntu), the compute pool
    ``compute_image_id`` (the GPU image); agents are tagged with :func:`masteryaml.config_hash`."""
    provider: masteryaml.Provider = {
        "type": "aws",
        "region": cfg.region,
        "master_url": masteryaml.master_url(cfg.port),
        "image_id": r.agent_image_id,
        "instance_name": f"det-agent-{cfg.cluster_id}",
        "root_volume_size": 200,
        "iam_instance_profile_arn": r.agent_profile_arn,
        "network_interface": {
            "public_ip": True,
            "subnet_id": r.agent_subnet_id,
            "security_group_id": r.agent_sg_id,
        },
        "tag_key": CLUSTER_TAG,
        "tag_value": cfg.cluster_id,
        "custom_tags": [{"key": k, "value": v} for k, v in cfg.extra_tags],
        "min_instances": cfg.min_dynamic_agents,
        "max_instances": cfg.max_dynamic_agents,
        "max_idle_agent_period": cfg.max_idle_agent_period,
        "max_agent_starting_period": cfg.max_agent_starting_period,
        "spot": cfg.spot,
    }
    if cfg.spot_max_price:
        provider["spot_max_price"] = cfg.spot_max_price
    if cfg.keypair:
        provider["ssh_key_name"] = cfg.keypair
    spec = masteryaml.MasterYamlSpec(
        cluster_name=cfg.cluster_id,
        port=cfg.port,
        db=masteryaml.DbSpec(host=r.db_host, port=r.db_port),
        checkpoint_storage=masteryaml.checkpoint_storage("s3", r.bucket),
        provider=provider,
        pools=masteryaml.standard_pools(
            cfg.aux_agent_instance_type,
            cfg.compute_agent_instance_type,
            cfg.max_aux_containers_per_agent,
        ),
        scheduler_type=cfg.scheduler_type,
        preemption=cfg.preemption_enabled,
        task_container_defaults=masteryaml.task_images(cfg.env_images, cfg.gc_image),
        tls=cfg.tls,
        registry_auth=cfg.registry.registry_auth() if cfg.registry else None,
        agent_install=boot.agent_install(cfg.boot, "s3", r.bucket, "agent,aws", cfg.log_group_name),
    )
    config = masteryaml.master_config(spec)
    for pool in config["resource_pools"]:
        if pool["pool_name"] == masteryaml.COMPUTE_POOL and r.compute_image_id:
            pool["provider"]["image_id"] = r.compute_image_id
    material = cfg.boot.tls_material() if cfg.tls else None
    digest = masteryaml.config_hash(config, material.cert_pem if material else None)
    for pool in config["resource_pools"]:
        pool["provider"].setdefault("custom_tags", []).append(
            {"key": CONFIG_HASH_TAG, "value": digest}
        )
    return config


def fetch_secret_command(region: str, secret_arn: str) -> str:
    code = (
        "import boto3,sys; sys.stdout.write(boto3.client('secretsmanager', region_name=sys.argv[1])"
        ".get_secret_value(SecretId=sys.argv[2])['SecretString'])"
    )
    return f"/opt/det/bin/python3 -c {shlex.quote(code)} {shlex.quote(region)} {shlex.quote(secret_arn)}"


def user_data(
    cfg: AwsConfig, master_yaml: str, secret_arn: str, bucket: str, log_group: str | None
) -> str:
    """The master's user data: the boot script, run by cloud-init at every boot."""
    wheel, sha, constraints = boot.wheel_location(cfg.boot, "s3", bucket)
    script = userdata.render_master_boot(
        userdata.MasterBoot(
            cloud="aws",
            master_yaml=master_yaml,
            local_ip=_IMDS_IP,
            fetch_secret=fetch_secret_command(cfg.region, secret_arn),
            wheel_url=wheel,
            wheel_sha256=sha,
            constraints_url=constraints,
            extras="master,aws",
            package_index=cfg.boot.package_index,
            region=cfg.region,
            tls=cfg.tls,
            log_target=log_group,
        )
    )
    return _check_size(userdata.every_boot_user_data(script))


def _check_size(user_data: str) -> str:
    size = len(user_data.encode())
    if size > limits.EC2_USER_DATA_MAX:
        raise DeployError(
            f"the master's user data is {size} bytes, above EC2's limit of "
            f"{limits.EC2_USER_DATA_MAX}: use fewer or shorter --add-tag values"
        )
    return user_data


# Stand-ins for the values only known once the stack exists, each as long as AWS makes them
# (a bucket name has at most 63 characters, an RDS endpoint is the instance identifier, 12
# characters, the region and the domain), so the size check below holds for the real ones.
_LONGEST = Resolved(
    bucket="b" * 63,
    db_host="d" * 63 + ".c0123456789a.ap-southeast-5.rds.amazonaws.com",
    db_port=65535,
    agent_image_id="ami-0123456789abcdef0",
    agent_subnet_id="subnet-0123456789abcdef0",
    agent_sg_id="sg-0123456789abcdef0",
    agent_profile_arn="arn:aws:iam::123456789012:instance-profile/" + "p" * 128,
    compute_image_id="ami-0123456789abcdef1",
)


def check_user_data_size(cfg: AwsConfig) -> int:
    """The size of the master's user data for ``cfg`` with the longest values AWS can fill in;
    a :class:`DeployError` before anything is created when it would exceed EC2's 16 KiB."""
    yaml_text = masteryaml.render(master_yaml_config(cfg, _LONGEST))
    secret = f"arn:aws:secretsmanager:{cfg.region}:123456789012:secret:det-{cfg.cluster_id}-secret-0123abc-AbCdEf"
    return len(user_data(cfg, yaml_text, secret, _LONGEST.bucket, cfg.log_group_name).encode())


def release_objects(
    name: str, opts: BootOptions, bucket: pulumi.Input[str] | None, child: pulumi.ResourceOptions
) -> list[pulumi.Output[str]]:
    """det's wheel and constraints as objects of the bucket (none with ``--det-wheel-url``);
    returns their ids, so the user data is rendered once they exist."""
    if bucket is None:
        return []

    def put(resource_name: str, key: str, **kwargs: Any) -> pulumi.CustomResource:
        return aws.s3.BucketObjectv2(resource_name, bucket=bucket, key=key, opts=child, **kwargs)

    return uploads.release_objects(name, opts, put)


@dataclasses.dataclass
class MasterArgs:
    config: AwsConfig
    image_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    instance_profile: pulumi.Input[str]
    master_yaml: pulumi.Input[str]
    secret_arn: pulumi.Input[str]
    tags: Mapping[str, str]
    log_group: pulumi.Input[str] | None = None
    """The CloudWatch Logs group for boot logs (the bootstrap's log shipper writes there)."""
    bucket: pulumi.Input[str] | None = None
    """The cluster's bucket: det's wheel and constraints are uploaded there for the VMs."""


class Master(pulumi.ComponentResource):
    instance_id: pulumi.Output[str]
    public_ip: pulumi.Output[str]
    user_data: pulumi.Output[str]

    def __init__(self, name: str, args: MasterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("det:aws:Master", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cfg = args.config
        uploads = release_objects(name, cfg.boot, args.bucket, child)
        self.user_data = pulumi.Output.all(
            args.master_yaml, args.secret_arn, args.bucket, args.log_group, *uploads
        ).apply(lambda v: user_data(cfg, v[0], v[1], v[2] or "", v[3]))
        instance = aws.ec2.Instance(
            name,
            ami=args.image_id,
            instance_type=cfg.master_instance_type,
            subnet_id=args.subnet_id,
            vpc_security_group_ids=[args.security_group_id],
            iam_instance_profile=args.instance_profile,
            key_name=cfg.keypair,
            user_data=self.user_data,
            user_data_replace_on_change=False,
            metadata_options=aws.ec2.InstanceMetadataOptionsArgs(
                # 1: only the master's own processes (it runs no containers) reach IMDS.
                http_tokens="required",
                http_put_response_hop_limit=1,
            ),
            root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(
                volume_size=MASTER_VOLUME_GIB, volume_type="gp3", encrypted=True
            ),
            tags={**dict(args.tags), "Name": f"det-master-{cfg.cluster_id}", "det-role": "master"},
            opts=child,
        )
        eip = aws.ec2.Eip(
            name, instance=instance.id, domain="vpc", tags=dict(args.tags), opts=child
        )
        self.instance_id = instance.id
        self.public_ip = eip.public_ip
        self.register_outputs({"instance_id": instance.id, "public_ip": eip.public_ip})
