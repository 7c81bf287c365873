"""Allocations: one run of a task (a trial's, an interactive task's, a checkpoint GC's) on
slots, from PENDING to TERMINATED. What is common to every kind is here: an agent's report of a
container moves its allocation on, and an allocation ends once (:func:`on_terminated`); what
differs by kind (the container, what the end does to the trial or task) is the kind's module,
found by the allocation's ``kind`` column in :mod:`det.master.services.task_kinds`. Queuing one
is :func:`det.master.services.allocation_rows.queue`.
"""

from __future__ import annotations

from dataclasses import dataclass

from det.common.agent_protocol import ContainerReport
from det.common.container_spec import ContainerSpec
from det.common.jsontypes import JSONObject
from det.master import db, states
from det.master.db import Conn
from det.master.handles import MasterState
from det.master.services import allocation_rows, containers, task_kinds, task_services, users
from det.master.services.allocation_rows import Allocation


def on_terminated(conn: Conn, allocation_id: str, exit_code: int | None, reason: str) -> None:
    """Ends an allocation (idempotent) and hands its end to its kind's module."""
    alloc = allocation_rows.get(conn, allocation_id, lock=True)
    if alloc is None or alloc.state == states.TERMINATED:
        return
    conn.execute(
        "UPDATE allocations SET exit_code = %s, exit_reason = coalesce(exit_reason, %s) WHERE id = %s",
        (exit_code, reason, allocation_id),
    )
    states.transition(conn, "allocation", allocation_id, states.TERMINATED, reason, strict=False)
    users.revoke_task_session(conn, allocation_id)  # its DET_USER_TOKEN ends with it
    # Its slots are free and its task may go on (a trial's next run, a GC's experiment): the
    # control loop looks at once rather than at its next tick.
    conn.execute("NOTIFY det_wakeup")
    if reason.startswith((containers.IMAGE_PULL_FAILED, containers.START_FAILED)):
        # The container never ran, so it left no log of its own: the reason is the task's log.
        conn.execute(
            "INSERT INTO task_logs (task_id, allocation_id, agent_id, log, level, stdtype, source)"
            " VALUES (%s, %s, %s, %s, 'ERROR', 'stderr', 'master')",
            (
                alloc.task_id,
                allocation_id,
                next(iter(alloc.placement or {}), None),
                reason + "\n",
            ),
        )
    task_kinds.of(alloc).on_terminated(conn, alloc, exit_code, reason)


@dataclass(frozen=True, slots=True)
class _Reported:
    """What an agent's container report is checked against (:func:`update_container`)."""

    state: str
    kind: str
    trial_id: int | None


@dataclass(frozen=True, slots=True)
class _Placed:
    placement: JSONObject | None


def update_container(
    conn: Conn, allocation_id: str, container: ContainerReport, agent_id: str | None = None
) -> None:
    """Applies a container state an agent (``agent_id``) reported (states only move forward; a
    state this master does not know is ignored)."""
    state = str(container.get("state") or "")
    if state not in states.ALLOCATION_ORDER or state == states.PENDING:
        return
    if state == states.TERMINATED:
        code = container.get("exitCode")
        if (
            code == 0
            and agent_id is not None
            and _gang_still_running(conn, allocation_id, agent_id)
        ):
            return
        reason = container.get("error") or f"container exited with code {code}"
        on_terminated(conn, allocation_id, code if isinstance(code, int) else -1, str(reason))
        return
    row = db.fetch_row(
        conn,
        _Reported,
        "SELECT state, kind, trial_id FROM allocations WHERE id = %s",
        (allocation_id,),
    )
    if row is None:
        return
    port = container.get("proxyPort")
    if isinstance(port, int):  # an interactive task's service is up
        task_services.service_ready(conn, allocation_id, port)
    container_id = container.get("containerId")
    if container_id:
        conn.execute(
            "UPDATE allocations SET container_id = %s WHERE id = %s AND container_id IS DISTINCT FROM %s",
            (container_id, allocation_id, container_id),
        )
    if states.ALLOCATION_ORDER.index(state) > states.ALLOCATION_ORDER.index(row.state):
        states.transition(
            conn, "allocation", allocation_id, state, "reported by agent", strict=False
        )
        if state == states.RUNNING and row.kind == "TRIAL":
            conn.execute(
                "UPDATE trials SET started_at = coalesce(started_at, now()) WHERE id = %s",
                (row.trial_id,),
            )


def _gang_still_running(conn: Conn, allocation_id: str, agent_id: str) -> bool:
    """Whether ``agent_id``'s container of an allocation on several agents exited cleanly while
    another of its containers has not: the allocation ends with its last container (the chief's
    may still be saving its last checkpoint after a worker is done), a failed container ends it
    at once (and the others are killed). Each clean exit is recorded once as an event; agents
    report an exited container at every heartbeat until it is no longer wanted, so two last
    exits seen in concurrent transactions end it at the next one."""
    row = db.fetch_row(
        conn,
        _Placed,
        "SELECT placement FROM allocations WHERE id = %s AND state <> 'TERMINATED'",
        (allocation_id,),
    )
    gang = set(row.placement or {}) if row is not None else set()
    if len(gang) < 2 or agent_id not in gang:
        return False
    exited = set(
        db.column(
            conn,
            str,
            "SELECT message FROM events WHERE entity = 'allocation' AND entity_id = %s"
            " AND kind = 'container exited'",
            (allocation_id,),
        )
    )
    if agent_id not in exited:
        states.record_event(conn, "allocation", allocation_id, "container exited", agent_id)
        exited.add(agent_id)
    return not gang <= exited


def container_spec(conn: Conn, st: MasterState, alloc: Allocation, agent_id: str) -> ContainerSpec:
    """What the agent needs to start this allocation's container (see docs/internals.md): its
    kind's spec."""
    return task_kinds.of(alloc).container_spec(conn, st, alloc, agent_id)
