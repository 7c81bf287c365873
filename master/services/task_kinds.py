"""Task kind -> what the master does with its allocations: the one place the kinds are joined.

An allocation's ``kind`` column (:data:`~det.master.services.allocation_rows.Kind`, written
when :func:`~det.master.services.allocation_rows.queue` queues it) picks its entry here, and
``allocations.container_spec`` (what the agent is told to run) and ``allocations.on_terminated``
(what its end does) call that entry; nothing probes other tables to tell the kinds apart. One
module per kind, each with the same two functions:

==============================  ============================================
kind                            module
==============================  ============================================
TRIAL                           :mod:`det.master.services.trial_runs`
COMMAND, NOTEBOOK, SHELL,       :mod:`det.master.services.ntsc` (one module,
TENSORBOARD                     its ``kind`` column says which)
CHECKPOINT_GC                   :mod:`det.master.services.checkpoint_gc`
==============================  ============================================

Adding a kind: its name in ``allocation_rows.Kind``, in the column's CHECK (a new migration)
and here, with a module whose runs are queued through ``allocation_rows.queue``;
tests/integration/test_task_kinds.py fails until all three agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from det.common.container_spec import ContainerSpec
from det.master.db import Conn
from det.master.handles import MasterState
from det.master.services import checkpoint_gc, ntsc, trial_runs
from det.master.services.allocation_rows import Allocation, Kind

#: ``(conn, state, allocation, agent id)`` -> the spec of the container the agent runs.
SpecBuilder = Callable[[Conn, MasterState, Allocation, str], ContainerSpec]
#: ``(conn, allocation as it was (locked), exit code, reason)``: the allocation has ended.
EndHandler = Callable[[Conn, Allocation, int | None, str], None]


@dataclass(frozen=True)
class TaskKind:
    """What one kind of allocation runs and what its end does."""

    container_spec: SpecBuilder
    on_terminated: EndHandler


_NTSC = TaskKind(ntsc.container_spec, ntsc.on_terminated)

KINDS: dict[Kind, TaskKind] = {
    "TRIAL": TaskKind(trial_runs.container_spec, trial_runs.on_terminated),
    "COMMAND": _NTSC,
    "NOTEBOOK": _NTSC,
    "SHELL": _NTSC,
    "TENSORBOARD": _NTSC,
    "CHECKPOINT_GC": TaskKind(checkpoint_gc.container_spec, checkpoint_gc.on_terminated),
}


def of(alloc: Allocation) -> TaskKind:
    """The entry of ``alloc``'s kind; ValueError for a kind with none (the column's CHECK
    admits only registered kinds, so this means a kind left unregistered)."""
    entry = KINDS.get(alloc.kind)
    if entry is None:
        raise ValueError(f"allocations.kind: no task kind {alloc.kind!r} is registered")
    return entry
