"""Service accounts of a GCP cluster and their (narrow) grants.

* master: a custom project role holding only what creating and deleting agent VMs needs
  (:data:`PROVISIONER_PERMISSIONS`); ``roles/iam.serviceAccountUser`` on the agent service
  account only (to attach it to agents); object admin on the checkpoint bucket only; secret
  accessor on the cluster secret only (granted in ``storage.py``).
* agents: object admin on the checkpoint bucket only; Artifact Registry reader (task images
  from the project's own registries, pulled with the VM's token).
* both: ``roles/logging.logWriter`` (boot and service logs to Cloud Logging); the bucket grant
  covers reading the ``det-release/`` objects ``up`` ships det in.

No primitive role (owner/editor/viewer) anywhere.
"""

from __future__ import annotations

import dataclasses
import hashlib

import pulumi
import pulumi_gcp as gcp
import pulumi_random as random

PROVISIONER_PERMISSIONS = (
    "compute.instances.create",
    "compute.instances.delete",
    "compute.instances.get",
    "compute.instances.list",
    "compute.instances.setLabels",
    "compute.instances.setMetadata",
    "compute.instances.setServiceAccount",
    "compute.instances.setTags",
    "compute.disks.create",
    "compute.subnetworks.use",
    "compute.subnetworks.useExternalIp",
    "compute.images.useReadOnly",
    "compute.zoneOperations.get",
    "compute.zoneOperations.list",
    "compute.regions.get",
)


# Project-level roles (these services grant no narrower scope), by account.
MASTER_PROJECT_ROLES = ("roles/logging.logWriter",)
AGENT_PROJECT_ROLES = ("roles/logging.logWriter", "roles/artifactregistry.reader")

# Service-account ids: 6-30 characters, [a-z][-a-z0-9]*[a-z0-9].
_ACCOUNT_ID_MAX = 30


def account_id(cluster_id: str, role: str) -> str:
    """``det-<cluster id>-<role>``; a cluster id too long for that keeps its first characters
    and gains a hash of the whole id, so two clusters never share an account."""
    plain = f"det-{cluster_id}-{role}"
    if len(plain) <= _ACCOUNT_ID_MAX - 1:  # ids of at most 23 characters: as before the hash
        return plain
    digest = hashlib.sha256(cluster_id.encode()).hexdigest()[:6]
    keep = _ACCOUNT_ID_MAX - len(f"det--{digest}-{role}")
    return f"det-{cluster_id[:keep]}-{digest}-{role}"


def agents_only_condition(prefix: str) -> str:
    """An IAM condition (CEL) that lets the provisioner role act on instances and disks only
    when their name starts with ``prefix`` (an agent's boot disk takes its instance's name).
    Other resource types the role needs (subnetworks, images, operations, the zone or project a
    list is made in) are not named after the cluster and pass unchanged. Labels cannot be used:
    IAM conditions see resource names and Resource Manager tags, not labels."""
    kinds = '["compute.googleapis.com/Instance", "compute.googleapis.com/Disk"]'
    return (
        f"!(resource.type in {kinds}) || "
        f'resource.name.extract("/instances/{{name}}").startsWith("{prefix}") || '
        f'resource.name.extract("/disks/{{name}}").startsWith("{prefix}")'
    )


@dataclasses.dataclass
class ServiceAccountsArgs:
    project: str
    cluster_id: str
    bucket: pulumi.Input[str]
    agent_name_prefix: str | None = None
    """Grant the provisioner role only on instances and disks named with this prefix (an IAM
    condition, :func:`agents_only_condition`); None: unconditionally (the VM master)."""


def _provisioner_role(
    name: str,
    args: ServiceAccountsArgs,
    master_member: pulumi.Output[str],
    child: pulumi.ResourceOptions,
) -> None:
    """The master's custom role (:data:`PROVISIONER_PERMISSIONS`), granted on the project with
    a condition on the agents' name prefix when there is one."""
    # A deleted custom role's id stays reserved for weeks: a random suffix lets the same
    # cluster id be deployed again right after `down`.
    suffix = random.RandomString(f"{name}-role", length=6, special=False, upper=False, opts=child)
    role = gcp.projects.IAMCustomRole(
        f"{name}-provisioner",
        project=args.project,
        role_id=suffix.result.apply(lambda s: f"det_{args.cluster_id.replace('-', '_')}_{s}"),
        title=f"det provisioner ({args.cluster_id})",
        permissions=list(PROVISIONER_PERMISSIONS),
        opts=child,
    )
    gcp.projects.IAMMember(
        f"{name}-master-provisioner",
        project=args.project,
        role=role.name,
        member=master_member,
        condition=(
            gcp.projects.IAMMemberConditionArgs(
                title="det agents only",
                description=f"instances and disks named {args.agent_name_prefix}*",
                expression=agents_only_condition(args.agent_name_prefix),
            )
            if args.agent_name_prefix
            else None
        ),
        opts=child,
    )


class ServiceAccounts(pulumi.ComponentResource):
    master_email: pulumi.Output[str]
    agent_email: pulumi.Output[str]
    master_member: pulumi.Output[str]

    def __init__(
        self, name: str, args: ServiceAccountsArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("det:gcp:ServiceAccounts", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        master = gcp.serviceaccount.Account(
            f"{name}-master",
            project=args.project,
            account_id=account_id(args.cluster_id, "m"),
            display_name=f"det master ({args.cluster_id})",
            opts=child,
        )
        agent = gcp.serviceaccount.Account(
            f"{name}-agent",
            project=args.project,
            account_id=account_id(args.cluster_id, "a"),
            display_name=f"det agents ({args.cluster_id})",
            opts=child,
        )
        master_member = master.email.apply(lambda e: f"serviceAccount:{e}")
        agent_member = agent.email.apply(lambda e: f"serviceAccount:{e}")
        _provisioner_role(name, args, master_member, child)
        gcp.serviceaccount.IAMMember(
            f"{name}-master-uses-agent",
            service_account_id=agent.name,
            role="roles/iam.serviceAccountUser",
            member=master_member,
            opts=child,
        )
        for who, member, roles in (
            ("master", master_member, MASTER_PROJECT_ROLES),
            ("agent", agent_member, AGENT_PROJECT_ROLES),
        ):
            for role_name in roles:
                gcp.projects.IAMMember(
                    f"{name}-{who}-{role_name.rsplit('.', 1)[-1].lower()}",
                    project=args.project,
                    role=role_name,
                    member=member,
                    opts=child,
                )
        for who, member in (("master", master_member), ("agent", agent_member)):
            gcp.storage.BucketIAMMember(
                f"{name}-{who}-bucket",
                bucket=args.bucket,
                role="roles/storage.objectAdmin",
                member=member,
                opts=child,
            )
        self.master_email = master.email
        self.agent_email = agent.email
        self.master_member = master_member
        self.register_outputs({"master_email": master.email, "agent_email": agent.email})
