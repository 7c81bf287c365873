"""Each job's cap on the slots it uses at once (an experiment's ``resources.max_slots``).

A job at its cap gets no more placements: its pending requests wait (and say so) while the rest
of the pool is scheduled as if they were not there; they neither block lower priorities nor
make anything be preempted, nor ask the provisioner for machines. A cap lowered below what a job
already uses stops nothing: running work finishes, and new work waits until the job is under
the cap again. A cap of ``None`` or ``0`` is no cap.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from det.master.scheduler.model import Request


class JobCaps:
    """The slots each capped job uses (placed requests, including those being preempted: their
    slots are not free yet), updated as a pass places more."""

    def __init__(self, requests: Iterable[Request]) -> None:
        self.cap: dict[str, int] = {}
        self.used: Counter[str] = Counter()
        for r in requests:
            if r.max_slots:
                self.cap[r.job_id] = r.max_slots
            if r.placement is not None:
                self.used[r.job_id] += r.slots

    def allows(self, r: Request) -> bool:
        """Whether placing ``r`` keeps its job within its cap."""
        cap = self.cap.get(r.job_id)
        return cap is None or r.slots == 0 or self.used[r.job_id] + r.slots <= cap

    def take(self, r: Request) -> None:
        """``r`` is placed (or its slots are held for it)."""
        self.used[r.job_id] += r.slots

    def release(self, r: Request) -> None:
        """``r`` was counted by :meth:`take` but could not be placed after all."""
        self.used[r.job_id] -= r.slots
