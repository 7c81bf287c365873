"""AWS checks before ``up``: credentials, key pair, vCPU quota for the agents, the spot
service-linked role; and the one-time look-up of the images the stack pins.

Quota codes by instance family (EC2 "Running On-Demand/Spot ... instances", counted in vCPUs);
there is no API that maps an instance type to its quota, so the table is by first letters.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import boto3
from botocore import exceptions

from det.deploy.aws.config import DLAMI_SSM_PARAMETER, UBUNTU_SSM_PARAMETER, AwsConfig, Images
from det.deploy.common.errors import PreflightError
from det.deploy.common.quotas import Need, ec2_vcpus, total

logger = logging.getLogger(__name__)

ON_DEMAND_QUOTA_CODES = {
    "f": "L-74FC7D96",
    "g": "L-DB2E81BA",
    "vt": "L-DB2E81BA",
    "inf": "L-1945791B",
    "p": "L-417A185B",
    "x": "L-7295265B",
}
SPOT_QUOTA_CODES = {
    "f": "L-88CF9481",
    "g": "L-3819A6DF",
    "vt": "L-3819A6DF",
    "inf": "L-B5D1601B",
    "p": "L-7212CCBC",
    "x": "L-E3A00192",
}
STANDARD_ON_DEMAND = "L-1216C47A"
STANDARD_SPOT = "L-34B43A08"


def quota_code(instance_type: str, spot: bool) -> str:
    match = re.match(r"([a-z]+)\d", instance_type)
    family = match.group(1) if match else ""
    table, standard = (
        (SPOT_QUOTA_CODES, STANDARD_SPOT) if spot else (ON_DEMAND_QUOTA_CODES, STANDARD_ON_DEMAND)
    )
    return table.get(family, standard)


def vcpus_required(vcpus_per_instance: int, max_agents: int) -> int:
    return vcpus_per_instance * max_agents


def local_credentials(profile: str | None) -> str | None:
    """The problem with this machine's AWS credentials as found locally (no call to AWS; None:
    found). ``check_credentials`` then asks STS whether AWS accepts them."""

    try:
        session = boto3.Session(profile_name=profile)
    except exceptions.ProfileNotFound:
        return f"the AWS profile {profile!r} is not in ~/.aws/config or ~/.aws/credentials"
    if session.get_credentials() is None:
        return (
            "no AWS credentials found: run `aws configure`, or set AWS_PROFILE or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
        )
    return None


def check_credentials(session: Any) -> str:
    """Returns the caller's account id."""

    if session.get_credentials() is None:
        raise PreflightError(
            "no AWS credentials found: run `aws configure`, or set AWS_PROFILE or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
        )
    try:
        return str(session.client("sts").get_caller_identity()["Account"])
    except (exceptions.ClientError, exceptions.BotoCoreError) as e:
        raise PreflightError(f"AWS credentials were rejected: {e}") from None


def check_keypair(session: Any, name: str) -> None:

    try:
        session.client("ec2").describe_key_pairs(KeyNames=[name])
    except exceptions.ClientError as e:
        if e.response.get("Error", {}).get("Code") == "InvalidKeyPair.NotFound":
            raise PreflightError(
                f"EC2 key pair {name!r} does not exist in {session.region_name}; create it with "
                f"`aws ec2 create-key-pair --key-name {name}` or pass another --keypair"
            ) from None
        raise PreflightError(f"cannot check key pair {name!r}: {e}") from None


def check_db_instance_class(session: Any, instance_class: str, version: str) -> str | None:
    """The RDS class runs PostgreSQL ``version`` (a major version) on gp3 in the session's
    region (DescribeOrderableDBInstanceOptions), else a :class:`PreflightError` naming classes
    that do; returns a warning when it cannot be checked."""

    try:
        pages = session.client("rds").get_paginator("describe_orderable_db_instance_options")
        options = [
            o
            for page in pages.paginate(Engine="postgres", DBInstanceClass=instance_class)
            for o in page.get("OrderableDBInstanceOptions", [])
        ]
        if not options:
            # None at all for PostgreSQL is not an answer real RDS gives (an emulator's).
            known = pages.paginate(Engine="postgres", PaginationConfig={"MaxItems": 1})
            if not any(page.get("OrderableDBInstanceOptions") for page in known):
                return f"cannot check RDS class {instance_class}: no offerings listed"
    except (exceptions.ClientError, exceptions.BotoCoreError) as e:
        return f"cannot check RDS class {instance_class}: {e}"
    if not options:
        raise PreflightError(
            f"RDS offers no PostgreSQL on {instance_class} in {session.region_name}; "
            "pass another --db-instance-type (e.g. db.m7g.large or db.m6i.large)"
        )
    versions = sorted(
        {str(o.get("EngineVersion", "")) for o in options if o.get("StorageType") == "gp3"}
    )
    if not any(v == version or v.startswith(version + ".") for v in versions):
        have = ", ".join(versions[-3:]) or "none"
        raise PreflightError(
            f"RDS does not run PostgreSQL {version} on {instance_class} with gp3 storage in "
            f"{session.region_name} (it does: {have}); pass another --db-instance-type"
        )
    return None


def check_master_image(session: Any, image_id: str, volume_gib: int) -> None:
    """The master's root volume (``volume_gib``) is at least its image's root snapshot: EC2
    refuses a smaller one (InvalidBlockDeviceMapping), e.g. with a large ``--master-image-id``."""

    try:
        images = session.client("ec2").describe_images(ImageIds=[image_id])["Images"]
    except exceptions.ClientError as e:
        raise PreflightError(f"cannot read the master's image {image_id}: {e}") from None
    if not images:
        raise PreflightError(
            f"the master's image {image_id} does not exist in {session.region_name}"
        )
    root = images[0].get("RootDeviceName")
    for mapping in images[0].get("BlockDeviceMappings", []):
        size = int(mapping.get("Ebs", {}).get("VolumeSize") or 0)
        if mapping.get("DeviceName") == root and size > volume_gib:
            raise PreflightError(
                f"the master's image {image_id} has a {size} GiB root snapshot, more than the "
                f"master's {volume_gib} GiB volume; use an image of at most {volume_gib} GiB"
            )


def pick_zones(session: Any, instance_types: list[str]) -> tuple[str, str]:
    """The two availability zones of a new VPC's subnets: the first offers every one of
    ``instance_types`` (the master and both agent pools launch into it), the second is another
    zone (RDS wants subnets in two). Zones are not alike: a GPU type missing from the first zone
    would fail every agent launch ("not supported in your requested Availability Zone")."""
    ec2 = session.client("ec2")
    zones = [
        z["ZoneName"]
        for z in ec2.describe_availability_zones(
            Filters=[
                {"Name": "state", "Values": ["available"]},
                {"Name": "zone-type", "Values": ["availability-zone"]},
            ]
        )["AvailabilityZones"]
    ]
    offered: dict[str, set[str]] = {}
    pages = ec2.get_paginator("describe_instance_type_offerings")
    for instance_type in dict.fromkeys(instance_types):
        offered[instance_type] = {
            o["Location"]
            for page in pages.paginate(
                LocationType="availability-zone",
                Filters=[{"Name": "instance-type", "Values": [instance_type]}],
            )
            for o in page.get("InstanceTypeOfferings", [])
        }
    good = [z for z in zones if all(z in where for where in offered.values())]
    if not good:
        missing = ", ".join(
            f"{t} ({', '.join(sorted(where)) or 'no zone'})" for t, where in offered.items()
        )
        raise PreflightError(
            f"no availability zone of {session.region_name} offers all of the cluster's "
            f"instance types: {missing}; pick other instance types or another --region"
        )
    if len(zones) < 2:
        raise PreflightError(f"{session.region_name} has fewer than two availability zones")
    return good[0], next(z for z in good[1:] + zones if z != good[0])


def check_vcpu_quota(session: Any, instance_type: str, max_agents: int, spot: bool) -> str | None:
    """Fails when the quota is too small; returns a warning when it cannot be checked."""

    code = quota_code(instance_type, spot)
    try:
        types = session.client("ec2").describe_instance_types(InstanceTypes=[instance_type])[
            "InstanceTypes"
        ]
        if not types:
            raise PreflightError(
                f"unknown instance type {instance_type!r} in {session.region_name}"
            )
        per_instance = int(types[0]["VCpuInfo"]["DefaultVCpus"])
        quota = session.client("service-quotas").get_service_quota(
            ServiceCode="ec2", QuotaCode=code
        )
        available = int(quota["Quota"]["Value"])
    except exceptions.ClientError as e:
        if e.response.get("Error", {}).get("Code") == "InvalidInstanceType":
            raise PreflightError(
                f"unknown instance type {instance_type!r} in {session.region_name}"
            ) from None
        return f"could not check the vCPU quota {code}: {e}"
    except exceptions.BotoCoreError as e:
        return f"could not check the vCPU quota {code}: {e}"
    needed = vcpus_required(per_instance, max_agents)
    if needed > available:
        market = "spot" if spot else "on-demand"
        raise PreflightError(
            f"{max_agents} x {instance_type} need {needed} {market} vCPUs but quota {code} in "
            f"{session.region_name} allows {available}; request an increase at "
            f"https://{session.region_name}.console.aws.amazon.com/servicequotas/home/services/ec2/quotas/{code} "
            "or lower --max-dynamic-agents"
        )
    return None


SPOT_SERVICE_ROLE = "AWSServiceRoleForEC2Spot"
SPOT_ROLE_PATH = "/aws-service-role/spot.amazonaws.com/"
SPOT_ROLE_FIX = "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com"


def spot_service_role_exists(session: Any) -> bool:
    """Whether the account has the spot service-linked role (without it every spot launch
    fails with ``AuthFailure.ServiceLinkedRoleCreationNotPermitted`` unless the caller may
    create it). The stack creates it when missing; it cannot be created twice, so this check
    decides. Found by its path, which AWS fixes for the service, not by its name."""

    try:
        pages = (
            session.client("iam").get_paginator("list_roles").paginate(PathPrefix=SPOT_ROLE_PATH)
        )
        return any(page["Roles"] for page in pages)
    except exceptions.ClientError as e:
        raise PreflightError(
            f"cannot check the spot service-linked role {SPOT_SERVICE_ROLE} "
            f"({e.response.get('Error', {}).get('Code')}); have an administrator run "
            f"`{SPOT_ROLE_FIX}` once, or deploy without --spot"
        ) from None


def resolve_images(session: Any) -> Images:
    """Read the public SSM parameters once: Ubuntu 24.04 for the master and the aux pool, the
    Deep Learning Base GPU AMI for the compute pool."""

    ssm = session.client("ssm")
    found: dict[str, str] = {}
    for parameter in (UBUNTU_SSM_PARAMETER, DLAMI_SSM_PARAMETER):
        try:
            found[parameter] = str(ssm.get_parameter(Name=parameter)["Parameter"]["Value"])
        except exceptions.ClientError as e:
            code = e.response.get("Error", {}).get("Code")
            raise PreflightError(
                f"cannot read the image parameter {parameter} in {session.region_name} ({code}); "
                "pass --agent-image-id, or allow ssm:GetParameter on public parameters"
            ) from None
    ubuntu = found[UBUNTU_SSM_PARAMETER]
    return Images(master=ubuntu, aux_agent=ubuntu, compute_agent=found[DLAMI_SSM_PARAMETER])


def quota_needs(cfg: AwsConfig) -> list[Need]:
    """The EC2 vCPU quotas the cluster needs with both pools at ``max_dynamic_agents`` (agents
    of both pools share ``--spot``; a VM master is on-demand, a serverless one runs on Fargate,
    outside these quotas)."""
    n = cfg.max_dynamic_agents
    spot_codes = {*SPOT_QUOTA_CODES.values(), STANDARD_SPOT}
    parts: dict[str, list[tuple[int | None, int]]] = {}
    why: dict[str, list[str]] = {}
    master = [] if cfg.serverless else [("master", cfg.master_instance_type, 1, False)]
    for role, instance_type, count, spot in (
        *master,
        ("aux", cfg.aux_agent_instance_type, n, cfg.spot),
        ("compute", cfg.compute_agent_instance_type, n, cfg.spot),
    ):
        code = quota_code(instance_type, spot)
        parts.setdefault(code, []).append((ec2_vcpus(instance_type), count))
        why.setdefault(code, []).append(f"{count} x {instance_type} ({role})")
    return [
        Need(
            code,
            cfg.region,
            total(parts[code]),
            f"{'spot' if code in spot_codes else 'on-demand'} vCPUs: {' + '.join(why[code])}",
        )
        for code in parts
    ]
