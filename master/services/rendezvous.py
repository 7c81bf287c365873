"""Where the containers of one trial run find each other, and which of them is the chief.

A trial on more slots than one agent has runs as one container per agent (the scheduler's gang
placement, ``allocations.placement``: agent id -> slot ids). Each container is told the whole
gang in its environment, as Determined's rendezvous answers it:

* ``DET_CONTAINER_ADDRS``: the agents' addresses (JSON list, in container rank order); task
  containers use their host's network, so a container is reached at its agent's address;
* ``DET_CONTAINER_RANK``: this container's place in that list; rank 0 hosts the chief;
* ``DET_CONTAINER_SLOT_COUNTS``: the slots of each container (JSON list, same order).

The order is the agent ids' (sorted), so every container's spec, built at any heartbeat by any
master process, says the same. A container other than the chief's gets its allocation's token
with ``.RANK`` appended (:func:`container_token`): the master then knows which container a
report comes from and refuses a training report from any but the chief's
(:func:`det.master.services.trial_runs.refuse_report_from_worker`). The suffix is no secret and
no boundary between the containers of one allocation (they share code and credentials): it tells
an honest mistake (a script that trains on its own in every container) from a trial's chief.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence

from det.common.jsontypes import JSONValue
from det.master import db
from det.master.db import Conn

#: Separates an allocation token from a container rank (allocation tokens are URL-safe base64:
#: never a dot).
_RANK_SEP = "."


def container_order(placement: Mapping[str, Sequence[str]] | None) -> list[str]:
    """The agents of a placement in container rank order (pure)."""
    return sorted(placement or {})


def container_token(token: str, rank: int) -> str:
    """The token container ``rank`` of an allocation reports with (pure): the allocation's own
    for the chief's container, ``TOKEN.RANK`` for the others."""
    return token if rank == 0 else f"{token}{_RANK_SEP}{rank}"


def split_token(token: str) -> tuple[str, int]:
    """(the allocation token, the container rank) of a presented token (pure)."""
    base, sep, rank = token.rpartition(_RANK_SEP)
    if sep and base and rank.isdigit() and len(rank) <= 4:
        return base, int(rank)
    return token, 0


@dataclasses.dataclass(frozen=True)
class _AgentAddresses:
    id: str
    addresses: JSONValue  # agents.addresses: a JSON list of strings, as the agent reported it


def rendezvous_env(
    conn: Conn, placement: Mapping[str, Sequence[str]] | None, agent_id: str
) -> dict[str, str]:
    """The ``DET_CONTAINER_*`` variables of the container on ``agent_id``."""
    order = container_order(placement) or [agent_id]
    rows = db.fetch_rows(
        conn, _AgentAddresses, "SELECT id, addresses FROM agents WHERE id = ANY(%s)", (order,)
    )
    addresses = {r.id: r.addresses for r in rows}
    return rendezvous_variables(order, addresses, placement or {}, agent_id)


def rendezvous_variables(
    order: Sequence[str],
    addresses: Mapping[str, JSONValue],
    placement: Mapping[str, Sequence[str]],
    agent_id: str,
) -> dict[str, str]:
    """(pure) An agent that reported no address is taken as this host (``127.0.0.1``)."""

    def address(agent: str) -> str:
        found = addresses.get(agent)
        if isinstance(found, list) and found:
            return str(found[0])
        return "127.0.0.1"

    return {
        "DET_CONTAINER_ADDRS": json.dumps([address(a) for a in order]),
        "DET_CONTAINER_RANK": str(order.index(agent_id) if agent_id in order else 0),
        "DET_CONTAINER_SLOT_COUNTS": json.dumps(
            [max(1, len(placement.get(a) or [])) for a in order]
        ),
    }
