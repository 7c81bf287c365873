"""The quotas a cluster needs at its largest (every pool at ``--max-dynamic-agents``), for the
dry-run and the docs. Pure: vCPU counts come from the machine type's name where the clouds'
naming fixes them (EC2 ``large`` 2, ``xlarge`` 4, ``Nxlarge`` 4N; GCE ``*-standard-N``,
``*-highmem-N``, ``*-highcpu-N``); the preflight reads the real counts from the cloud.
"""

from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class Need:
    quota: str
    """The cloud's name for it (``L-DB2E81BA``, ``CPUS``…)."""
    scope: str
    """A region, or ``project`` / ``account`` for a global quota."""
    amount: int | None
    """None: cannot be known offline (a size whose vCPUs the name does not give)."""
    why: str


def ec2_vcpus(instance_type: str) -> int | None:
    size = instance_type.partition(".")[2]
    if size == "large":
        return 2
    if size == "xlarge":
        return 4
    match = re.fullmatch(r"(\d+)xlarge", size)
    return 4 * int(match.group(1)) if match else None


def gce_vcpus(machine_type: str) -> int | None:
    match = re.fullmatch(r"[a-z0-9]+-(?:standard|highmem|highcpu)-(\d+)", machine_type)
    return int(match.group(1)) if match else None


def total(parts: list[tuple[int | None, int]]) -> int | None:
    """The sum of vCPUs times count; None when one count of vCPUs is unknown."""
    if any(v is None for v, _ in parts):
        return None
    return sum((v or 0) * n for v, n in parts)


def render(needs: list[Need]) -> str:
    lines = ["Quotas this cluster needs with every pool at --max-dynamic-agents (preflight checks"]
    lines[0] += " them at `up`):"
    for need in needs:
        amount = "?" if need.amount is None else str(need.amount)
        lines.append(f"  {need.quota} ({need.scope}): {amount}  [{need.why}]")
    return "\n".join(lines)
