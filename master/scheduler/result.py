"""What one policy's pass produces before it is turned into a :class:`Decision`."""

from __future__ import annotations

import dataclasses

from det.master.scheduler.model import Placement, Request


@dataclasses.dataclass
class PassResult:
    """``order``: the requests in the order the pass considered them (the queue order)."""

    order: list[Request] = dataclasses.field(default_factory=list)
    placements: dict[str, Placement] = dataclasses.field(default_factory=dict)
    preemptions: list[str] = dataclasses.field(default_factory=list)
    waiting: list[str] = dataclasses.field(default_factory=list)
