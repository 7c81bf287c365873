"""What GCP offers, known offline: regions and zones, machine-type families, GPU types and the
machine series each attaches to, Cloud SQL tiers and their edition.

``det deploy gcp up`` checks its flags against these tables before anything reaches Google, so a
typo fails in a second with one line instead of half-way through a deploy. The tables follow
Google's published lists (Compute Engine "Regions and zones", "GPU machine types", Cloud SQL
"Machine series overview"); a region Google opens later is refused until it is added here.
"""

from __future__ import annotations

import difflib
import re

from det.deploy.common.errors import DeployError

# Region → zone suffixes. Most regions have a, b, c; the exceptions are spelled out.
_ABC = "abc"
ZONES: dict[str, str] = {
    "africa-south1": _ABC,
    "asia-east1": _ABC,
    "asia-east2": _ABC,
    "asia-northeast1": _ABC,
    "asia-northeast2": _ABC,
    "asia-northeast3": _ABC,
    "asia-south1": _ABC,
    "asia-south2": _ABC,
    "asia-southeast1": _ABC,
    "asia-southeast2": _ABC,
    "australia-southeast1": _ABC,
    "australia-southeast2": _ABC,
    "europe-central2": _ABC,
    "europe-north1": _ABC,
    "europe-north2": _ABC,
    "europe-southwest1": _ABC,
    "europe-west1": "bcd",
    "europe-west2": _ABC,
    "europe-west3": _ABC,
    "europe-west4": _ABC,
    "europe-west6": _ABC,
    "europe-west8": _ABC,
    "europe-west9": _ABC,
    "europe-west10": _ABC,
    "europe-west12": _ABC,
    "me-central1": _ABC,
    "me-central2": _ABC,
    "me-west1": _ABC,
    "northamerica-northeast1": _ABC,
    "northamerica-northeast2": _ABC,
    "northamerica-south1": _ABC,
    "southamerica-east1": _ABC,
    "southamerica-west1": _ABC,
    "us-central1": "abcf",
    "us-east1": "bcd",
    "us-east4": _ABC,
    "us-east5": _ABC,
    "us-south1": _ABC,
    "us-west1": _ABC,
    "us-west2": _ABC,
    "us-west3": _ABC,
    "us-west4": _ABC,
}

# Machine-type families (the part before the first '-').
MACHINE_FAMILIES = frozenset(
    {
        "a2", "a3", "a4", "c2", "c2d", "c3", "c3d", "c4", "c4a", "c4d", "e2", "f1", "g1", "g2",
        "g4", "h3", "m1", "m2", "m3", "m4", "n1", "n2", "n2d", "n4", "n4a", "n4d", "t2a", "t2d",
        "x4", "z3",
    }
)  # fmt: skip
_MACHINE_RE = re.compile(
    r"^(?P<family>[a-z][a-z0-9]*)-(?:"
    r"(?:standard|highmem|highcpu|highgpu|megagpu|ultragpu|edgegpu|ultramem|megamem|hypermem"
    r"|highlssd|standardlssd)-\d+[a-z]*(?:-lssd|-nolssd|-metal)?"
    r"|custom-\d+-\d+(?:-ext)?|micro|small|medium)$"
)

# GPU type → the machine-type families it attaches to. N1 takes attached GPUs; the newer GPUs
# come built into their accelerator-optimized machine types.
GPU_MACHINE_FAMILIES: dict[str, tuple[str, ...]] = {
    "nvidia-tesla-t4": ("n1",),
    "nvidia-tesla-v100": ("n1",),
    "nvidia-tesla-p100": ("n1",),
    "nvidia-tesla-p4": ("n1",),
    "nvidia-tesla-a100": ("a2",),
    "nvidia-a100-80gb": ("a2",),
    "nvidia-l4": ("g2",),
    "nvidia-h100-80gb": ("a3",),
    "nvidia-h100-mega-80gb": ("a3",),
    "nvidia-h200-141gb": ("a3",),
    "nvidia-b200": ("a4",),
    "nvidia-rtx-pro-6000": ("g4",),
}

# Cloud SQL: ENTERPRISE_PLUS runs only the predefined N2 (``db-perf-optimized-N-*``,
# ``db-memory-optimized-N-*``) and C4A tiers; shared-core and custom tiers are ENTERPRISE only.
# The API's default edition for POSTGRES_16 is ENTERPRISE_PLUS, so it is always set explicitly.
_SQL_TIERS = (
    (re.compile(r"^db-(?:perf|memory)-optimized-N-\d+$"), "ENTERPRISE_PLUS"),
    (re.compile(r"^db-c4a-[a-z0-9-]+$"), "ENTERPRISE_PLUS"),
    (re.compile(r"^db-(?:f1-micro|g1-small)$"), "ENTERPRISE"),
    (re.compile(r"^db-custom-(?:N4-)?\d+-\d+$"), "ENTERPRISE"),
)
SQL_EDITIONS = ("ENTERPRISE", "ENTERPRISE_PLUS")


def _close(value: str, choices: list[str] | frozenset[str]) -> str:
    near = difflib.get_close_matches(value, sorted(choices), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(near)}?)" if near else ""


def check_region(region: str) -> None:
    if region not in ZONES:
        raise DeployError(f"--region {region!r} is not a GCP region{_close(region, list(ZONES))}")


def check_zone(zone: str, region: str) -> None:
    zone_region, _, suffix = zone.rpartition("-")
    if zone_region != region:
        raise DeployError(f"--zone {zone!r} is not in --region {region!r}")
    if suffix not in ZONES[region]:
        known = [f"{region}-{s}" for s in ZONES[region]]
        raise DeployError(f"--zone {zone!r} does not exist; {region} has {', '.join(known)}")


def machine_family(machine_type: str) -> str:
    return machine_type.split("-", 1)[0]


def check_machine_type(flag: str, machine_type: str) -> None:
    m = _MACHINE_RE.match(machine_type)
    if not m:
        raise DeployError(
            f"{flag} {machine_type!r} is not a GCE machine type (like n1-standard-4, "
            "e2-medium, g2-standard-8 or n2-custom-4-16384)"
        )
    family = m.group("family")
    if family not in MACHINE_FAMILIES:
        raise DeployError(
            f"{flag} {machine_type!r}: unknown machine family {family!r}"
            f"{_close(family, MACHINE_FAMILIES)}"
        )


def check_gpu(gpu_type: str, gpu_num: int, machine_type: str) -> None:
    if gpu_type not in GPU_MACHINE_FAMILIES:
        raise DeployError(
            f"--gpu-type {gpu_type!r} is not a GCE GPU type"
            f"{_close(gpu_type, list(GPU_MACHINE_FAMILIES))}"
        )
    if gpu_num < 0:
        raise DeployError(f"--gpu-num must be >= 0 (got {gpu_num})")
    families = GPU_MACHINE_FAMILIES[gpu_type]
    if gpu_num and machine_family(machine_type) not in families:
        raise DeployError(
            f"--gpu-type {gpu_type} needs a {'/'.join(f + '-*' for f in families)} machine type, "
            f"not --compute-agent-instance-type {machine_type}"
        )


def sql_edition(tier: str) -> str:
    """The Cloud SQL edition a tier belongs to; one line naming the tier when it is unknown."""
    for pattern, edition in _SQL_TIERS:
        if pattern.match(tier):
            return edition
    raise DeployError(
        f"--db-tier {tier!r} is not a Cloud SQL PostgreSQL tier (ENTERPRISE: db-custom-CPUS-MB, "
        "db-g1-small, db-f1-micro; ENTERPRISE_PLUS: db-perf-optimized-N-CPUS)"
    )


def check_sql_edition(tier: str, edition: str | None) -> str:
    """The edition to deploy: the tier's own, or ``edition`` when it matches the tier."""
    own = sql_edition(tier)
    if edition is None:
        return own
    if edition not in SQL_EDITIONS:
        raise DeployError(f"--db-edition {edition!r} must be one of {', '.join(SQL_EDITIONS)}")
    if edition != own:
        raise DeployError(
            f"--db-tier {tier} is a {own} tier and cannot run as --db-edition {edition}"
            + (" (use a db-perf-optimized-N-* tier)" if edition == "ENTERPRISE_PLUS" else "")
        )
    return edition
