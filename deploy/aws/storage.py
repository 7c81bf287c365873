"""Stateful parts of an AWS cluster: checkpoint bucket, PostgreSQL on RDS, the cluster secret.

The bucket and its protections are kept when the stack is destroyed (``retain_on_delete``):
checkpoints outlive a cluster unless ``det deploy aws down --delete-bucket`` removes them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import pulumi
import pulumi_aws as aws
import pulumi_random as random

from det.deploy.aws.config import POSTGRES_MAJOR, AwsConfig
from det.deploy.common import passwords
from det.deploy.common.tls import TlsMaterial


@dataclasses.dataclass
class CheckpointBucketArgs:
    tags: Mapping[str, str]
    versioning: bool = False


class CheckpointBucket(pulumi.ComponentResource):
    bucket: pulumi.Output[str]
    arn: pulumi.Output[str]

    def __init__(
        self, name: str, args: CheckpointBucketArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("det:aws:CheckpointBucket", name, None, opts)
        keep = pulumi.ResourceOptions(parent=self, retain_on_delete=True)
        bucket = aws.s3.Bucket(name, force_destroy=False, tags=dict(args.tags), opts=keep)
        aws.s3.BucketPublicAccessBlock(
            name,
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=keep,
        )
        aws.s3.BucketOwnershipControls(
            name,
            bucket=bucket.id,
            rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"),
            opts=keep,
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            name,
            bucket=bucket.id,
            rules=[
                aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                    apply_server_side_encryption_by_default=aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                        sse_algorithm="aws:kms"
                    ),
                    bucket_key_enabled=True,
                )
            ],
            opts=keep,
        )
        if args.versioning:
            aws.s3.BucketVersioning(
                name,
                bucket=bucket.id,
                versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(
                    status="Enabled"
                ),
                opts=keep,
            )
        self.bucket = bucket.bucket
        self.arn = bucket.arn
        self.register_outputs({"bucket": bucket.bucket, "arn": bucket.arn})


def checkpoint_bucket(name: str, cfg: AwsConfig) -> CheckpointBucket:
    """The cluster's checkpoint bucket ``<name>-checkpoints`` as ``cfg`` asks."""
    return CheckpointBucket(
        f"{name}-checkpoints",
        CheckpointBucketArgs(tags=cfg.tags, versioning=cfg.bucket_versioning),
    )


@dataclasses.dataclass
class ClusterSecretArgs:
    """``initial_user_password``: given by the user, else generated."""

    tags: Mapping[str, str]
    initial_user_password: pulumi.Input[str] | None = None
    tls: TlsMaterial | None = None
    """The master's certificate and key, stored in the secret beside the passwords."""
    registry_password: pulumi.Input[str] | None = None
    """A private registry's password (``--registry-password``), stored beside them."""


class ClusterSecret(pulumi.ComponentResource):
    """Generated passwords in Secrets Manager: the master reads them at boot, so they never
    appear in user data (readable with ec2:DescribeInstanceAttribute)."""

    db_password: pulumi.Output[str]
    initial_user_password: pulumi.Output[str]
    arn: pulumi.Output[str]

    def __init__(
        self, name: str, args: ClusterSecretArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("det:aws:ClusterSecret", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        made = passwords.generate(
            name, args.initial_user_password, child, args.tls, args.registry_password
        )
        secret = aws.secretsmanager.Secret(
            name, recovery_window_in_days=0, tags=dict(args.tags), opts=child
        )
        aws.secretsmanager.SecretVersion(
            name,
            secret_id=secret.id,
            secret_string=made.payload,
            opts=child,
        )
        self.db_password = made.db_password
        self.initial_user_password = made.initial_user_password
        self.arn = secret.arn
        self.register_outputs({"arn": secret.arn})


@dataclasses.dataclass
class DatabaseArgs:
    private_subnet_ids: Sequence[pulumi.Input[str]]
    security_group_id: pulumi.Input[str]
    password: pulumi.Input[str]
    tags: Mapping[str, str]
    instance_class: str = "db.m7g.large"
    allocated_storage: int = 20
    final_snapshot_prefix: str | None = None
    """RDS takes a snapshot ``<prefix>-<random hex>`` (unique per stack, so a later cluster of
    the same id cannot collide with it) when the stack deletes the database; None: none."""


class Database(pulumi.ComponentResource):
    """PostgreSQL on RDS. With ``final_snapshot_identifier``, deleting it (``down``) keeps a
    final snapshot; ``down --delete-data`` deletes that snapshot afterwards."""

    address: pulumi.Output[str]
    port: pulumi.Output[int]
    final_snapshot_identifier: pulumi.Output[str | None]

    def __init__(self, name: str, args: DatabaseArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("det:aws:Database", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        snapshot: pulumi.Output[str] | None = None
        if args.final_snapshot_prefix:
            prefix = args.final_snapshot_prefix
            suffix = random.RandomId(f"{name}-final", byte_length=4, opts=child)
            snapshot = suffix.hex.apply(lambda h: f"{prefix}-{h}")
        subnets = aws.rds.SubnetGroup(
            name, subnet_ids=list(args.private_subnet_ids), tags=dict(args.tags), opts=child
        )
        db = aws.rds.Instance(
            name,
            engine="postgres",
            engine_version=POSTGRES_MAJOR,
            instance_class=args.instance_class,
            allocated_storage=args.allocated_storage,
            storage_type="gp3",
            storage_encrypted=True,
            publicly_accessible=False,
            db_subnet_group_name=subnets.name,
            vpc_security_group_ids=[args.security_group_id],
            db_name="determined",
            username="postgres",
            password=args.password,
            backup_retention_period=7,
            # PostgreSQL 15+ on RDS defaults to rds.force_ssl=1: only TLS connections.
            skip_final_snapshot=snapshot is None,
            final_snapshot_identifier=snapshot,
            copy_tags_to_snapshot=True,
            deletion_protection=False,
            apply_immediately=True,
            tags=dict(args.tags),
            opts=child,
        )
        self.address = db.address
        self.port = db.port
        self.final_snapshot_identifier = pulumi.Output.from_input(snapshot)
        self.register_outputs({"address": db.address, "port": db.port})
