"""States that more than one package of det names, as ``StrEnum``: one definition for the
master (``det.master.states``, which moves them), the agent (``det.agent.reconcile``, which
reports them) and the agent protocol (:mod:`det.common.agent_protocol`).

A member *is* its string: ``AllocationState.RUNNING == "RUNNING"``, it hashes as the string,
and JSON, psycopg and f-strings write ``RUNNING``. The values are the exact strings stored in
PostgreSQL (``allocations.state``) and sent in the heartbeat's container reports, so a row or a
report read back compares equal to a member without conversion and no migration is needed.

Runs on Python 3.8 (it is part of the harness bundle, though task containers never import it):
``enum.StrEnum`` is 3.11's, so older interpreters get the same class from ``str`` and ``Enum``.
"""

from __future__ import annotations

import enum
import sys

if sys.version_info >= (3, 11):
    from enum import StrEnum  # novermin
else:  # pragma: no cover - task images' older Pythons

    class StrEnum(str, enum.Enum):
        """``enum.StrEnum`` of Python 3.11: members are strings and print as their value."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return format(str(self.value), spec)


class AllocationState(StrEnum):
    """One run of a task on slots, in the order it moves (it only moves forward). The master
    holds every state; an agent's container reports the ones from ASSIGNED on."""

    #: Queued: no slots yet (the master's only; no container exists).
    PENDING = "PENDING"
    ASSIGNED = "ASSIGNED"
    PULLING = "PULLING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    #: Reported (never held by the agent) while an exited container's last log lines are still
    #: being shipped.
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"


#: The states in the order an allocation moves through them.
ALLOCATION_ORDER = tuple(AllocationState)
