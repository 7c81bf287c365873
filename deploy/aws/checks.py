"""Offline checks of ``det deploy aws up`` flags: each failure is one line naming the value.

Regions come from botocore's bundled endpoint data (no network). Instance types have no
offline catalogue, so a type must have the shape ``<family><generation><attributes>.<size>``
with a family EC2 sells and a size EC2 uses; close matches are suggested.
"""

from __future__ import annotations

import difflib
import functools
import ipaddress
import re

import boto3

from det.deploy.common.errors import DeployError

# EC2 instance family prefixes (the letters before the generation digit), from the EC2
# instance type naming conventions.
FAMILIES = frozenset(
    {
        "a", "c", "d", "dl", "f", "g", "gr", "h", "hpc", "i", "im", "inf", "is", "m",
        "mac", "p", "r", "t", "trn", "u", "vt", "x", "z",
    }
)  # fmt: skip
SIZES = ("nano", "micro", "small", "medium", "large", "xlarge", "metal")
_SIZE_RE = re.compile(r"^(?:nano|micro|small|medium|large|\d*xlarge|metal(?:-\d+xl)?)$")
# <family><generation><attributes>[-<variant>], e.g. g4dn, m7i-flex, mac2-m2pro.
_PREFIX_RE = re.compile(r"^(?P<family>[a-z]+)\d+[a-z]*(?:-[a-z0-9]+)?$")
# High-memory types: u-6tb1.metal, u7i-12tb.224xlarge.
_HIGH_MEMORY_RE = re.compile(r"^u\d*[a-z]*-\d+tb\d*$")
_AMI_RE = re.compile(r"^ami-[0-9a-f]{8}(?:[0-9a-f]{9})?$")
# Common types, only to suggest a correction for a typo.
_SUGGESTIONS = tuple(
    f"{family}.{size}"
    for family in (
        "t3", "t3a", "m5", "m6i", "m7i", "c5", "c6i", "c7i", "r5", "r6i", "r7i", "g4dn", "g5",
        "g6", "g6e", "p3", "p4d", "p5", "inf2", "trn1",
    )
    for size in ("medium", "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge",
                 "16xlarge", "24xlarge", "48xlarge", "metal")
)  # fmt: skip


def _hint(value: str, choices: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(value, choices, n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""


@functools.cache
def known_regions() -> tuple[str, ...]:
    """EC2 regions of every partition in botocore's bundled endpoint data (offline)."""

    session = boto3.session.Session()
    regions: set[str] = set()
    for partition in session.get_available_partitions():
        regions.update(session.get_available_regions("ec2", partition_name=partition))
    return tuple(sorted(regions))


def check_region(region: str) -> None:
    regions = known_regions()
    if region not in regions:
        raise DeployError(f"--region {region!r} is not an AWS region{_hint(region, regions)}")


def check_instance_type(flag: str, value: str) -> None:
    prefix, dot, size = value.partition(".")
    match = _PREFIX_RE.match(prefix)
    if not dot or not prefix or not size or "." in size:
        reason = "expected <family><generation>.<size>, e.g. m6i.large"
    elif not _SIZE_RE.match(size):
        reason = f"unknown size {size!r} (sizes: {', '.join(SIZES)}, <N>xlarge)"
    elif _HIGH_MEMORY_RE.match(prefix) or (match and match.group("family") in FAMILIES):
        return
    elif match:
        reason = f"unknown instance family {match.group('family')!r}"
    else:
        reason = f"{prefix!r} is not <family><generation>[attributes]"
    raise DeployError(
        f"{flag} {value!r} is not an EC2 instance type: {reason}{_hint(value, _SUGGESTIONS)}"
    )


def check_db_instance_class(value: str) -> None:
    if not value.startswith("db."):
        raise DeployError(
            f"--db-instance-type {value!r} is not an RDS instance class: expected db.<type>, "
            "e.g. db.m7g.large"
        )
    check_instance_type("--db-instance-type", value[3:])


def check_cidr(flag: str, value: str) -> None:
    try:
        ipaddress.ip_network(value, strict=True)
    except ValueError as e:
        raise DeployError(f"{flag} {value!r} is not a CIDR block: {e}") from None


def check_ami_id(flag: str, value: str) -> None:
    if not _AMI_RE.match(value):
        raise DeployError(f"{flag} {value!r} is not an AMI id (ami- and 8 or 17 hex digits)")


_HOST_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


def looks_like_host_name(name: str) -> bool:
    """A fully qualified DNS name of at least two labels (what ACM issues a certificate for)."""
    labels = name.lower().rstrip(".").split(".")
    return len(name) <= 253 and len(labels) >= 2 and all(_HOST_LABEL.match(x) for x in labels)
