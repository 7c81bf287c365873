"""The agent's reconcile decision: desired state (from the master) + actual state -> actions.

Pure: frozen dataclasses in, a `Plan` out, no I/O. The rules (docs/internals.md):

| master says            | container here                 | action                      |
|------------------------|--------------------------------|-----------------------------|
| (unreachable)          | anything                       | nothing: keep it all        |
| RUN                    | none                           | start                       |
| RUN                    | any state                      | nothing (idempotent)        |
| KILL                   | not TERMINATED, not killing    | kill (graceful)             |
| KILL                   | none                           | report TERMINATED (unknown) |
| KILL or RUN            | TERMINATED                     | keep reporting              |
| not listed             | not TERMINATED, not killing    | kill (graceful)             |
| not listed             | TERMINATED, logs shipped       | remove (and stop reporting) |

One exception to "unreachable: keep it all", fencing (:func:`fence`): once no heartbeat has
been answered for :func:`fence_after` seconds, a little less than the master's agent timeout,
every container is stopped. By then the master has given the agent up, or is about to: it ends
the agent's allocations and runs their work again elsewhere, where a rank left running here
would train beside its own next run (and, for a gang, wait in a collective for ever).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from det.common.agent_protocol import AGENT_LOST, Action, ContainerReport
from det.common.states import AllocationState

#: The error reported for an allocation the master wants killed but this agent never had.
UNKNOWN_ALLOCATION_ERROR = "no container for this allocation on the agent"
#: The error reported for a container the agent stopped itself, fenced off from the master: the
#: master's own reason for an agent gone silent, so it treats the two alike (no restart counted).
FENCED_ERROR = AGENT_LOST
#: A fenced container's time between SIGTERM and SIGKILL (its task can reach no master: a
#: checkpoint it saved could not be registered).
FENCE_GRACE_SECONDS = 5.0
#: How long before the master's deadline the fenced containers are gone: the agent's request
#: timeout (10 s), since a heartbeat in flight when the link went down holds the loop that long
#: (its read times out), which covers, too, that the master's clock starts at the heartbeat it
#: received last and ours at that heartbeat's answer.
FENCE_MARGIN_SECONDS = 10.0


@dataclass(frozen=True)
class Desired:
    allocation_id: str
    action: Action


@dataclass(frozen=True)
class Actual:
    allocation_id: str
    state: AllocationState
    container_id: str | None = None
    exit_code: int | None = None
    error: str | None = None
    #: A graceful kill is already under way (do not start another).
    killing: bool = False
    #: Every log line of the container has been shipped (safe to remove it).
    logs_done: bool = True
    #: The container exited but its last lines are still on their way: report TERMINATING, so
    #: that whoever follows the task's logs until it ends (``det cmd run``) gets all of them.
    holding_end: bool = False
    #: An interactive task's service port, once it accepts connections (None before).
    proxy_port: int | None = None


@dataclass(frozen=True)
class Plan:
    start: tuple[str, ...] = ()
    kill: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()


def decide(desired: Sequence[Desired] | None, actual: Sequence[Actual]) -> Plan:
    """What to do now. `desired` is None when the last heartbeat got no answer."""
    if desired is None:
        return Plan()
    wanted = {d.allocation_id: d.action for d in desired}
    have = {a.allocation_id: a for a in actual}
    start = [d.allocation_id for d in desired if d.action == "RUN" and d.allocation_id not in have]
    kill: list[str] = []
    remove: list[str] = []
    for a in actual:
        action = wanted.get(a.allocation_id)
        if a.state == AllocationState.TERMINATED:
            if action is None and a.logs_done:
                remove.append(a.allocation_id)
        elif action != "RUN" and not a.killing:
            kill.append(a.allocation_id)
    return Plan(start=tuple(dict.fromkeys(start)), kill=tuple(kill), remove=tuple(remove))


def reports(desired: Sequence[Desired] | None, actual: Sequence[Actual]) -> list[ContainerReport]:
    """The `containers` list of the next heartbeat.

    Every container the agent has, plus a TERMINATED entry for each allocation the master last
    asked to KILL that the agent has no container for (it never started, or was lost), so the
    master can finish it instead of waiting forever.
    """
    out: list[ContainerReport] = []
    for a in actual:
        report: ContainerReport = {
            "allocationId": a.allocation_id,
            "containerId": a.container_id,
            "state": AllocationState.TERMINATING.value if a.holding_end else a.state.value,
            "exitCode": None if a.holding_end else a.exit_code,
            "error": None if a.holding_end else a.error,
        }
        if a.proxy_port:
            report["proxyPort"] = a.proxy_port
        out.append(report)
    have = {a.allocation_id for a in actual}
    for d in desired or ():
        if d.action == "KILL" and d.allocation_id not in have:
            out.append(
                {
                    "allocationId": d.allocation_id,
                    "containerId": None,
                    "state": AllocationState.TERMINATED.value,
                    "exitCode": None,
                    "error": UNKNOWN_ALLOCATION_ERROR,
                }
            )
            have.add(d.allocation_id)
    return out


def fence_after(master_timeout: float | None, configured: float | None) -> float | None:
    """Seconds without an answered heartbeat after which the agent stops its containers (None:
    never). ``configured`` (agent.yaml ``fence_seconds``) wins, 0 turning fencing off; else it
    follows the master's announced ``agentTimeoutSeconds``: the stop starts early enough that its
    grace and a margin end before the master's deadline, but never before half of it (a short
    timeout must not turn a blink into a stop). A master that announces none: never."""
    if configured is not None:
        return configured if configured > 0 else None
    if master_timeout is None or master_timeout <= 0:
        return None
    return max(master_timeout / 2, master_timeout - FENCE_GRACE_SECONDS - FENCE_MARGIN_SECONDS)


def fence(actual: Sequence[Actual], silent_seconds: float, after: float | None) -> tuple[str, ...]:
    """The allocations to stop now, ``silent_seconds`` after the last answered heartbeat: every
    container not yet ended or being stopped, once that is ``after`` or more."""
    if after is None or silent_seconds < after:
        return ()
    return tuple(
        a.allocation_id for a in actual if a.state != AllocationState.TERMINATED and not a.killing
    )
