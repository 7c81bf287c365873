"""det's agent protocol (docs/internals.md, "Agent protocol"): the request and answer bodies of
``POST /api/v1/agents/<id>/heartbeat``, ``GET /api/v1/agents/<id>/changes`` and ``POST
/api/v1/agent_enrollments``.

One definition for both ends: the master's routes validate bodies against these types
(``det.master.api.agents``, through ``@contract``) and its service reads them
(``det.master.services.agents``); the agent builds the heartbeat and reads the answers with them
(``det.agent.daemon``, ``det.agent.master_client``, ``det.agent.reconcile``), so mypy checks both
against the same keys and types. Keys are camelCase, as on the wire. The container spec a RUN
carries is :class:`det.common.container_spec.ContainerSpec`; allocation states are
:class:`det.common.states.AllocationState` values. Task containers never import this module.
"""

from __future__ import annotations

from typing import Any

from annotated_types import MaxLen
from typing_extensions import Annotated, Literal, NotRequired, Required, TypedDict

from det.common.container_spec import ContainerSpec

#: Longest resource pool name a heartbeat may name: the master's limit on names
#: (``det.master.limits.NAME``; tests/unit/test_agent_protocol.py holds the two equal).
POOL_NAME_MAX = 512
PoolName = Annotated[str, MaxLen(POOL_NAME_MAX)]

#: What the master wants done with an allocation on the agent.
Action = Literal["RUN", "KILL"]

#: Why an allocation ended when its agent went silent: the master's own verdict on an agent
#: without a heartbeat for ``agent_timeout_seconds``, and the ``error`` an agent reports for a
#: container it stopped itself after that long without an answer (fencing, docs/internals.md).
#: Either way the work runs again and no restart is counted.
AGENT_LOST = "agent lost"


class HeartbeatSlot(TypedDict, total=False):
    """One slot (device) the agent offers."""

    id: Required[str | int]
    type: str | None
    uuid: str | None
    brand: str | None
    memoryMb: int | None


class ContainerReport(TypedDict, total=False):
    """What the agent has for one allocation (or, for a KILL it has no container for, a
    TERMINATED entry so the master can finish the allocation)."""

    allocationId: str | None
    containerId: str | None
    #: An :class:`~det.common.states.AllocationState` value, from ASSIGNED on. Typed as a string
    #: on purpose: the master ignores a state it does not know (a newer agent's) rather than
    #: refuse the whole heartbeat.
    state: str | None
    exitCode: int | None
    error: str | None
    #: An interactive task's service port, once the agent saw it accept connections.
    proxyPort: int | None


class HeartbeatRequest(TypedDict, total=False):
    """The agent's actual state; the first heartbeat registers the agent."""

    slots: Required[list[HeartbeatSlot]]
    resourcePool: PoolName | None
    version: str | None
    labels: dict[str, Any] | None
    addresses: list[str] | None
    containers: list[ContainerReport] | None
    preemptionNotice: dict[str, Any] | None


class EnrollmentRequest(TypedDict):
    """``POST /api/v1/agent_enrollments``: an agent's bootstrap trades its machine's one-time
    ticket for the agent's own token."""

    ticket: str
    agentId: str


class EnrollmentResponse(TypedDict):
    agentToken: str


class DesiredContainer(TypedDict):
    """One allocation the master wants on the agent: RUN (with its spec) or KILL."""

    allocationId: str
    action: Action
    spec: NotRequired[ContainerSpec]
    #: Someone reads the allocation's logs now: ship its lines at once (RUN only; absent: no
    #: one does, or a master before it was added).
    logsWatched: NotRequired[bool]


class HeartbeatResponse(TypedDict):
    """The desired state: every allocation placed on the agent and not yet ended."""

    clusterId: str
    enabled: bool
    draining: bool
    heartbeatSeconds: float
    #: The master's ``agent_timeout_seconds``: how long it waits for a heartbeat before it gives
    #: the agent up and ends its allocations. The agent stops its containers before that
    #: (``det.agent.reconcile.fence_after``). Absent from masters before it was added.
    agentTimeoutSeconds: NotRequired[float]
    #: The longest an agent that holds the ``changes`` long-poll may go without a heartbeat
    #: while nothing it would report changed (``heartbeatSeconds`` stays its pass over its
    #: containers). Absent from masters before it was added: every pass sends.
    keepaliveSeconds: NotRequired[float]
    containers: list[DesiredContainer]


class ChangesParams(TypedDict, total=False):
    """``GET /api/v1/agents/<id>/changes`` (det's own): how long to wait for new work."""

    timeoutSeconds: float


class ChangesResponse(TypedDict):
    """``changed``: work for this agent changed (heartbeat now); false: the wait timed out."""

    changed: bool
