"""Whether a gang could *ever* be placed in a pool: checked when a job is created, so a job that
would wait forever is refused with the reason instead.

The gang rules are those of :mod:`det.master.scheduler.fitting`: one agent with enough slots,
or whole agents of one size that divides the request. A pool with a cloud provider can grow to
``max_instances`` instances of ``slots_per_instance`` slots, so that is what counts for it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from det.master.scheduler.model import AgentState

TIMES = "\u00d7"  # the multiplication sign of "2 agents TIMES 4 slots"

#: ``(max_instances, slots_per_instance)``: the most a provisioned pool can grow to.
Growth = tuple[int, int]


def pool_sizes(
    agents: Sequence[int] | Sequence[AgentState], growth: Growth | None = None
) -> Counter[int]:
    """Agent count by slot count, with the pool grown as far as its provider allows."""
    sizes: Counter[int] = Counter(a if isinstance(a, int) else a.slots for a in agents)
    if growth is not None:
        max_instances, per = growth
        if max_instances > 0:
            # Existing agents of that size may be the provider's instances: count the larger.
            sizes[per] = max(sizes[per], max_instances)
    return sizes


def fits_sizes(slots: int, sizes: Mapping[int, int]) -> bool:
    """Whether ``slots`` fit one agent, or whole agents of one size, of a pool with ``sizes``."""
    if slots <= 0:
        return True
    for size, count in sizes.items():
        if count <= 0 or size <= 0:
            continue
        if slots <= size or (slots % size == 0 and slots // size <= count):
            return True
    return False


def can_ever_fit(
    slots_needed: int,
    agents: Sequence[int] | Sequence[AgentState],
    growth: Growth | None = None,
) -> str | None:
    """``None`` when ``slots_needed`` could be placed in the pool at some point, else why not.

    ``agents``: the pool's agents, or their slot counts. ``growth``: ``(max_instances,
    slots_per_instance)`` for a pool with a cloud provider. A pool with no agents and no
    provider says nothing (``None``): its static agents may not have registered yet.
    """
    if slots_needed < 0:
        return f"needs {slots_needed} slots; a slot count cannot be negative"
    sizes = pool_sizes(agents, growth)
    if not any(s > 0 and c > 0 for s, c in sizes.items()):
        if growth is None and not agents:
            return None
        if slots_needed == 0:
            return None
        return f"needs {_slots(slots_needed)}; the pool {_describe(agents, growth)}, with no slots"
    if fits_sizes(slots_needed, sizes):
        return None
    single = max(s for s, c in sizes.items() if c > 0)
    multi = [(s * c, s, c) for s, c in sizes.items() if s > 0 and c > 1]
    largest_total, size, count = max(multi, default=(0, 0, 0))
    if slots_needed > max(single, largest_total):
        if largest_total > single:
            offer = f"{largest_total} ({count} agents {TIMES} {size} slots)"
        else:
            offer = f"{single} (one agent with {_slots(single)})"
        where = " when grown to its maximum" if growth is not None else ""
        return f"needs {_slots(slots_needed)}; the largest the pool can offer{where} is {offer}"
    multiples = sorted({s for s, c in sizes.items() if s > 0 and c * s >= slots_needed})
    return (
        f"needs {_slots(slots_needed)}, more than any single agent has ({single}); across agents a "
        f"trial uses whole agents of one size, so it must be a multiple of "
        f"{' or '.join(str(s) for s in multiples)} (the pool {_describe(agents, growth)})"
    )


def _describe(agents: Sequence[int] | Sequence[AgentState], growth: Growth | None) -> str:
    sizes = pool_sizes(agents)
    parts = [
        f"{c} agent{'s' if c != 1 else ''} {TIMES} {s} slots" for s, c in sorted(sizes.items()) if c
    ]
    text = "has " + (", ".join(parts) if parts else "no agents")
    if growth is not None:
        text += f" and can grow to {growth[0]} instances {TIMES} {_slots(growth[1])}"
    return text


def _slots(n: int) -> str:
    return f"{n} slot" if n == 1 else f"{n} slots"
