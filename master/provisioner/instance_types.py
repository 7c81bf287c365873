"""EC2 instance type → GPU count, the slots one agent on that machine offers.

GPU counts come from the EC2 accelerated-computing instance tables. Types not listed here need
``instance_slots`` in the pool config. CPU-only families map to 0 GPUs: on such a machine the
agent reports CPU slots instead (see :func:`slots_for`), which is how Determined's
``cpu_slots_allowed`` works.
"""

from __future__ import annotations

# Per-size GPU counts of the GPU families; every other size of a family is unknown.
_GPU_FAMILIES: dict[str, dict[str, int]] = {
    "p2": {"xlarge": 1, "8xlarge": 8, "16xlarge": 16},
    "p3": {"2xlarge": 1, "8xlarge": 4, "16xlarge": 8},
    "p3dn": {"24xlarge": 8},
    "p4d": {"24xlarge": 8},
    "p4de": {"24xlarge": 8},
    "p5": {"48xlarge": 8},
    "p5e": {"48xlarge": 8},
    "p5en": {"48xlarge": 8},
    "g3": {"4xlarge": 1, "8xlarge": 2, "16xlarge": 4},
    "g3s": {"xlarge": 1},
    "g4dn": {
        "xlarge": 1,
        "2xlarge": 1,
        "4xlarge": 1,
        "8xlarge": 1,
        "16xlarge": 1,
        "12xlarge": 4,
        "metal": 8,
    },
    "g5": {
        "xlarge": 1,
        "2xlarge": 1,
        "4xlarge": 1,
        "8xlarge": 1,
        "16xlarge": 1,
        "12xlarge": 4,
        "24xlarge": 4,
        "48xlarge": 8,
    },
    "g5g": {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 2, "metal": 2},
    "g6": {
        "xlarge": 1,
        "2xlarge": 1,
        "4xlarge": 1,
        "8xlarge": 1,
        "16xlarge": 1,
        "12xlarge": 4,
        "24xlarge": 4,
        "48xlarge": 8,
    },
    "g6e": {
        "xlarge": 1,
        "2xlarge": 1,
        "4xlarge": 1,
        "8xlarge": 1,
        "16xlarge": 1,
        "12xlarge": 4,
        "24xlarge": 4,
        "48xlarge": 8,
    },
}

# Families without GPUs: any size is a 0-GPU machine.
_CPU_FAMILIES = frozenset(
    {
        "t2", "t3", "t3a", "t4g",
        "c4", "c5", "c5a", "c5d", "c5n", "c6a", "c6g", "c6i", "c6id", "c6in", "c7a", "c7g", "c7i",
        "m4", "m5", "m5a", "m5ad", "m5d", "m5dn", "m5n", "m5zn", "m6a", "m6g", "m6i", "m6id",
        "m6in", "m7a", "m7g", "m7i",
        "r4", "r5", "r5a", "r5d", "r5n", "r6a", "r6g", "r6i", "r7a", "r7g", "r7i",
        "x1", "x1e", "x2idn", "x2iedn", "z1d", "i3", "i3en", "i4i", "d2", "d3", "h1",
    }
)  # fmt: skip


def gpus_for(instance_type: str) -> int | None:
    """GPUs of an EC2 instance type, ``0`` for CPU-only types, ``None`` if unknown."""
    family, _, size = instance_type.partition(".")
    if family in _GPU_FAMILIES:
        return _GPU_FAMILIES[family].get(size)
    if family in _CPU_FAMILIES and size:
        return 0
    return None


def slots_for(
    instance_type: str, *, override: int | None = None, cpu_slots_allowed: bool = False
) -> int | None:
    """Slots the provisioner counts for one instance of ``instance_type``.

    ``override`` (the pool's ``instance_slots``) wins. A CPU-only type counts as one CPU slot
    when ``cpu_slots_allowed`` (the agent then reports ``cpu`` slots), otherwise as zero slots,
    which only zero-slot tasks can use. ``None``: unknown type and no override.
    """
    if override is not None:
        return override
    gpus = gpus_for(instance_type)
    if gpus == 0 and cpu_slots_allowed:
        return 1
    return gpus


def known_types() -> list[str]:
    """Every GPU instance type in the table (for error messages)."""
    return sorted(f"{fam}.{size}" for fam, sizes in _GPU_FAMILIES.items() for size in sizes)
