"""Stateful parts of a GCP cluster: checkpoint bucket, Cloud SQL PostgreSQL (private IP only,
TLS only), the cluster secret and an optional Filestore share.

The bucket is kept when the stack is destroyed (``retain_on_delete``) unless
``det deploy gcp down --delete-bucket`` removes it.
"""

from __future__ import annotations

import dataclasses

import pulumi
import pulumi_gcp as gcp

from det.deploy.common import names, passwords
from det.deploy.common.tls import TlsMaterial
from det.deploy.gcp.config import GcpConfig


@dataclasses.dataclass
class BucketArgs:
    project: str
    location: str
    labels: dict[str, str]
    versioning: bool = False


class CheckpointBucket(pulumi.ComponentResource):
    name: pulumi.Output[str]

    def __init__(self, name: str, args: BucketArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("det:gcp:CheckpointBucket", name, None, opts)
        bucket = gcp.storage.Bucket(
            name,
            project=args.project,
            location=args.location.upper(),
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            force_destroy=False,
            versioning=gcp.storage.BucketVersioningArgs(enabled=args.versioning),
            labels=args.labels,
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
        )
        self.name = bucket.name
        self.register_outputs({"name": bucket.name})


def checkpoint_bucket(name: str, cfg: GcpConfig) -> CheckpointBucket:
    """The cluster's checkpoint bucket ``<name>-checkpoints`` as ``cfg`` asks."""
    return CheckpointBucket(
        f"{name}-checkpoints",
        BucketArgs(
            project=cfg.project_id,
            location=cfg.region,
            labels=cfg.all_labels,
            versioning=cfg.bucket_versioning,
        ),
    )


@dataclasses.dataclass
class ClusterSecretArgs:
    project: str
    secret_id: str
    initial_user_password: pulumi.Input[str] | None = None
    tls: TlsMaterial | None = None
    """The master's certificate and key, stored in the secret beside the passwords."""
    registry_password: pulumi.Input[str] | None = None
    """A private registry's password (``--registry-password``), stored beside them."""


class ClusterSecret(pulumi.ComponentResource):
    """Generated passwords in Secret Manager; the master's startup script reads them, so they
    never appear in instance metadata."""

    db_password: pulumi.Output[str]
    initial_user_password: pulumi.Output[str]
    secret_id: pulumi.Output[str]
    resource_path: str

    def __init__(
        self, name: str, args: ClusterSecretArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("det:gcp:ClusterSecret", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        made = passwords.generate(
            name, args.initial_user_password, child, args.tls, args.registry_password
        )
        secret = gcp.secretmanager.Secret(
            name,
            project=args.project,
            secret_id=args.secret_id,
            replication=gcp.secretmanager.SecretReplicationArgs(
                auto=gcp.secretmanager.SecretReplicationAutoArgs()
            ),
            opts=child,
        )
        gcp.secretmanager.SecretVersion(
            name,
            secret=secret.id,
            secret_data=made.payload,
            opts=child,
        )
        self.db_password = made.db_password
        self.initial_user_password = made.initial_user_password
        self.secret_id = secret.id
        self.resource_path = f"projects/{args.project}/secrets/{args.secret_id}"
        self.register_outputs({"secret_id": secret.id})

    def grant_access(self, name: str, member: pulumi.Input[str], project: str) -> None:
        gcp.secretmanager.SecretIamMember(
            name,
            project=project,
            secret_id=self.secret_id,
            role="roles/secretmanager.secretAccessor",
            member=member,
            opts=pulumi.ResourceOptions(parent=self),
        )


@dataclasses.dataclass
class DatabaseArgs:
    project: str
    region: str
    network_id: pulumi.Input[str]
    password: pulumi.Input[str]
    tier: str = "db-custom-1-3840"
    # Always explicit: for POSTGRES_16 the API defaults to ENTERPRISE_PLUS, which refuses the
    # custom and shared-core tiers (catalog.sql_edition gives the tier's own edition).
    edition: str = "ENTERPRISE"


class Database(pulumi.ComponentResource):
    """Cloud SQL over private services access.

    ``down`` and the private-services connection: Cloud SQL keeps producer resources behind the
    connection for days after the instance is deleted, so deleting the connection fails with
    "Producer services ... are still using this connection". The connection is therefore
    abandoned on delete, and ``det deploy gcp down`` removes its VPC peering (``peering``) from
    the network before Pulumi deletes the network (teardown.remove_service_peering).
    ``update_on_creation_fail`` lets a cluster re-created under the same network name update the
    connection Google still remembers instead of failing to create it.
    """

    host: pulumi.Output[str]
    peering: pulumi.Output[str]

    def __init__(self, name: str, args: DatabaseArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("det:gcp:Database", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # Private services access: a peering range for Google's services inside our network.
        peering = gcp.compute.GlobalAddress(
            f"{name}-peering",
            # Autonamed as before where that fits Compute Engine's 63 characters (a serverless
            # cluster's longer logical name with a long id does not): names.autoname_or_fit.
            name=names.autoname_or_fit(f"{name}-peering", 63),
            project=args.project,
            purpose="VPC_PEERING",
            address_type="INTERNAL",
            prefix_length=16,
            network=args.network_id,
            opts=child,
        )
        connection = gcp.servicenetworking.Connection(
            f"{name}-peering",
            network=args.network_id,
            service="servicenetworking.googleapis.com",
            reserved_peering_ranges=[peering.name],
            deletion_policy="ABANDON",
            update_on_creation_fail=True,
            opts=child,
        )
        instance = gcp.sql.DatabaseInstance(
            name,
            project=args.project,
            region=args.region,
            database_version="POSTGRES_16",
            deletion_protection=False,
            settings=gcp.sql.DatabaseInstanceSettingsArgs(
                tier=args.tier,
                edition=args.edition,
                availability_type="ZONAL",
                disk_autoresize=True,
                backup_configuration=gcp.sql.DatabaseInstanceSettingsBackupConfigurationArgs(
                    enabled=True
                ),
                ip_configuration=gcp.sql.DatabaseInstanceSettingsIpConfigurationArgs(
                    ipv4_enabled=False,
                    private_network=args.network_id,
                    ssl_mode="ENCRYPTED_ONLY",
                ),
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[connection]),
        )
        # The det user owns every table the master creates, and PostgreSQL refuses to drop a
        # role that owns objects: deleted in parallel with the database (they do not depend on
        # each other), the user's deletion failed and `down` needed a second run. Both are
        # abandoned instead; deleting the instance removes them with it.
        gcp.sql.Database(
            f"{name}-determined",
            project=args.project,
            name="determined",
            instance=instance.name,
            deletion_policy="ABANDON",
            opts=child,
        )
        gcp.sql.User(
            f"{name}-user",
            project=args.project,
            name="det",
            instance=instance.name,
            password=args.password,
            deletion_policy="ABANDON",
            opts=child,
        )
        self.host = instance.private_ip_address
        self.peering = connection.peering
        self.register_outputs({"host": instance.private_ip_address, "peering": connection.peering})


@dataclasses.dataclass
class FilestoreArgs:
    project: str
    zone: str
    network: pulumi.Input[str]
    capacity_gb: int = 1024


class Filestore(pulumi.ComponentResource):
    address: pulumi.Output[str]  # "IP:/share"

    def __init__(self, name: str, args: FilestoreArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("det:gcp:Filestore", name, None, opts)
        share = "det"
        fs = gcp.filestore.Instance(
            name,
            project=args.project,
            location=args.zone,
            tier="BASIC_HDD",
            file_shares=gcp.filestore.InstanceFileSharesArgs(
                capacity_gb=args.capacity_gb, name=share
            ),
            networks=[gcp.filestore.InstanceNetworkArgs(network=args.network, modes=["MODE_IPV4"])],
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.address = fs.networks.apply(lambda n: f"{(n[0].ip_addresses or [''])[0]}:/{share}")
        self.register_outputs({"address": self.address})
