"""Agents: the heartbeat (actual state in, desired state out), listing, enable/disable/drain."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg import pq
from psycopg.rows import args_row, class_row
from psycopg.types.json import Jsonb

from det.common.agent_protocol import (
    ContainerReport,
    DesiredContainer,
    HeartbeatRequest,
    HeartbeatResponse,
    HeartbeatSlot,
)
from det.common.jsontypes import JSONObject
from det.master import db, states
from det.master.db import Conn
from det.master.errors import InvalidArgument, NotFound
from det.master.handles import MasterState
from det.master.rows.agents import Agent, AgentRow, LiveAllocation, SlotDevice, SlotRow
from det.master.services import allocation_rows, allocations, containers

logger = logging.getLogger(__name__)


_R = TypeVar("_R")


def _rows(conn: Conn, row: type[_R]) -> psycopg.Cursor[_R]:
    return conn.cursor(row_factory=class_row(row))


def heartbeat(
    conn: Conn, st: MasterState, agent_id: str, report: HeartbeatRequest
) -> HeartbeatResponse:
    """The answer to an agent's heartbeat (its containers to run or kill), its report applied.

    Called outside a transaction (``conn`` in autocommit, the API's way), a heartbeat that
    changes nothing but the agent's liveness (nearly every one of a running agent) is three
    statements, each on its own: the update of the agent's row, the read of its slots and the
    read of its allocations, with no ``BEGIN`` and ``COMMIT`` round trips (on a loaded master each
    round trip costs a wait for the interpreter lock while the connection is held: bench/scale.py
    --waits). One that would change more (new slots, a container's state, a notice, work to
    start) is done again whole in one transaction, in which the upsert's lock on the agent's row
    orders two heartbeats of one agent. Called inside a transaction: that transaction."""
    pool = report.get("resourcePool") or "default"
    if st.config.pool(pool) is None:
        raise InvalidArgument(f"resourcePool: no pool named '{pool}'")
    if conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE:
        answer = _quiet(conn, st, agent_id, report, pool)
        if answer is not None:
            return answer
        with conn.transaction():
            return _heartbeat(conn, st, agent_id, report, pool)
    return _heartbeat(conn, st, agent_id, report, pool)


def _quiet(
    conn: Conn, st: MasterState, agent_id: str, report: HeartbeatRequest, pool: str
) -> HeartbeatResponse | None:
    """:func:`heartbeat`'s answer when its report changes nothing but the agent's liveness,
    each statement on its own; None when it would (:func:`_heartbeat` then, in a transaction)."""
    if report.get("preemptionNotice"):
        return None
    reported = _reported(report)
    touched = _touch(conn, agent_id, pool, report, list(reported))
    if touched is None:
        return None  # a new agent: registered with its slots in one transaction
    agent, read = touched
    if not agent.same_slots:
        return None
    row = _Upserted(agent.enabled, agent.draining, False)
    known = {r.id: r for r in read if r.id in reported}
    if not all(_changes_nothing(c, known.get(aid)) for aid, c in reported.items()):
        return None
    desired = [r for r in read if allocation_rows.is_live_on(r, agent_id)]
    if any(not a.kill_requested and not _has_container(reported.get(a.id)) for a in desired):
        return None  # work to start: its spec is built in the transaction
    return _answer(conn, st, agent_id, row, desired, reported, known)


def _upsert(conn: Conn, agent_id: str, pool: str, report: HeartbeatRequest) -> _Upserted:
    row = db.fetch_row(
        conn,
        _Upserted,
        "INSERT INTO agents (id, resource_pool, version, labels, addresses, preemption_notice)"
        " VALUES (%s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (id) DO UPDATE SET resource_pool = EXCLUDED.resource_pool, version = EXCLUDED.version,"
        " labels = EXCLUDED.labels, addresses = EXCLUDED.addresses,"
        " preemption_notice = coalesce(agents.preemption_notice, EXCLUDED.preemption_notice),"
        " last_heartbeat = now(), connected = true"
        " RETURNING enabled, draining, (xmax = 0) AS inserted",
        (
            agent_id,
            pool,
            *_described(report),
            Jsonb(report.get("preemptionNotice")) if report.get("preemptionNotice") else None,
        ),
    )
    assert row is not None
    return row


def _described(report: HeartbeatRequest) -> tuple[str, Jsonb, Jsonb]:
    """What the report says of the agent itself: its version, labels and addresses."""
    return (
        str(report.get("version") or ""),
        Jsonb(report.get("labels") or {}),
        Jsonb(report.get("addresses") or []),
    )


@dataclass(frozen=True, slots=True)
class _Touched:
    """What the quiet heartbeat's update of the agent's row answers."""

    enabled: bool
    draining: bool
    #: Whether the agent's slots as stored are the ones its report lists.
    same_slots: bool


# A quiet heartbeat's one statement: the agent's row touched (compared with the report's slots
# in the same update), and the allocations the answer needs (live on the agent or reported by
# it), one row each beside the agent's columns, or one row of NULLs for them when there are none.
_TOUCH_AND_READ = (
    "WITH t AS (UPDATE agents SET resource_pool = %s, version = %s, labels = %s, addresses = %s,"
    " last_heartbeat = now(), connected = true WHERE id = %s"
    " RETURNING enabled, draining, (SELECT coalesce(jsonb_object_agg(s.slot_id,"
    " jsonb_build_array(s.type, s.uuid, s.brand, s.memory_mb)), '{}'::jsonb)"
    " FROM slots s WHERE s.agent_id = agents.id) = %s::jsonb AS same_slots)"
    " SELECT t.enabled, t.draining, t.same_slots, a.* FROM t LEFT JOIN LATERAL ("
    + allocation_rows.LIVE_ON_OR_AMONG
    + ") a ON true ORDER BY a.id"
)


def _touch(
    conn: Conn, agent_id: str, pool: str, report: HeartbeatRequest, ids: list[str]
) -> tuple[_Touched, list[allocation_rows.Allocation]] | None:
    """:func:`_upsert` for an agent already registered (None for a new one, so that an agent is
    never seen registered without its slots), with the comparison of its stored slots to the
    report's, and :func:`allocation_rows.live_on_or_among` of ``ids``, in the same statement.
    Its read of the slots may predate a heartbeat of the same agent that committed while this
    update waited for the row: then it can only send this heartbeat to the transaction, or
    find this (older) report's slots, which the quiet path does not write. Its read of the
    allocations is as of the statement's start, as a read just before the update would be."""
    rows = (
        conn.cursor(row_factory=args_row(_touched_and_read))
        .execute(
            _TOUCH_AND_READ,
            (
                pool,
                *_described(report),
                agent_id,
                Jsonb(_slots_json(report["slots"])),
                agent_id,
                ids,
            ),
        )
        .fetchall()
    )
    if not rows:
        return None
    return rows[0][0], [alloc for _, alloc in rows if alloc is not None]


_TOUCHED_WIDTH = 3 + len(dataclasses.fields(allocation_rows.Allocation))


def _touched_and_read(*values: Any) -> tuple[_Touched, allocation_rows.Allocation | None]:
    """A row of :data:`_TOUCH_AND_READ`: the agent's three columns, then an allocation's (in
    ``Allocation``'s order, as ``allocation_rows.LIVE_ON_OR_AMONG`` selects them) or NULLs."""
    width = _TOUCHED_WIDTH
    if len(values) != width:
        raise TypeError(f"a quiet heartbeat's row has {len(values)} columns, not {width}")
    alloc = values[3:]
    return _Touched(*values[:3]), (
        allocation_rows.Allocation(*alloc) if alloc[0] is not None else None
    )


def _slots_json(slots: list[HeartbeatSlot]) -> JSONObject:
    """The report's slots as :func:`_touch` compares them with the stored ones (pure)."""
    return {k: [v.type, v.uuid, v.brand, v.memory_mb] for k, v in _wanted_slots(slots).items()}


def _registered(conn: Conn, agent_id: str, pool: str, slots: int) -> None:
    states.record_event(
        conn, "agent", agent_id, "registered", f"registered in pool {pool} with {slots} slots"
    )
    logger.info("agent %s registered (pool %s, %d slots)", agent_id, pool, slots)
    conn.execute("NOTIFY det_wakeup")  # its slots may take queued work now


def _reported(report: HeartbeatRequest) -> dict[str, ContainerReport]:
    reported: dict[str, ContainerReport] = {}
    for c in report.get("containers") or []:
        aid = c.get("allocationId")
        if isinstance(aid, str):
            reported[aid] = c
    return reported


def _heartbeat(
    conn: Conn, st: MasterState, agent_id: str, report: HeartbeatRequest, pool: str
) -> HeartbeatResponse:
    """:func:`heartbeat` in a transaction: the report applied, whatever it changes."""
    slots = report["slots"]
    row = _upsert(conn, agent_id, pool, report)
    if row.inserted:
        _registered(conn, agent_id, pool, len(slots))
    _sync_slots(conn, agent_id, slots)
    notice = report.get("preemptionNotice")
    if notice:
        _preempt_agent(conn, agent_id, notice)
    reported = _reported(report)
    # One read for the reported containers and the agent's live allocations (a running agent's
    # heartbeat changes nothing: the read is all it costs). A report that changes a row is
    # applied, and the live allocations are then read again: the answer follows the writes.
    read = allocation_rows.live_on_or_among(conn, agent_id, list(reported))
    known = {r.id: r for r in read if r.id in reported}
    wrote = False
    for aid, c in reported.items():
        if not _changes_nothing(c, known.get(aid)):
            allocations.update_container(conn, aid, c, agent_id)
            wrote = True
    desired = (
        allocation_rows.live_on(conn, agent_id)
        if wrote
        else [r for r in read if allocation_rows.is_live_on(r, agent_id)]
    )
    return _answer(conn, st, agent_id, row, desired, reported, known)


def _answer(
    conn: Conn,
    st: MasterState,
    agent_id: str,
    row: _Upserted,
    desired: list[allocation_rows.Allocation],
    reported: dict[str, ContainerReport],
    known: dict[str, allocation_rows.Allocation],
) -> HeartbeatResponse:
    out: list[DesiredContainer] = []
    for alloc in desired:
        item: DesiredContainer
        if alloc.kill_requested:
            item = {"allocationId": alloc.id, "action": "KILL"}
        elif _has_container(reported.get(alloc.id)):
            # The agent starts only what it does not report (det.agent.reconcile.decide): a
            # spec would be built and sent for nothing.
            item = {"allocationId": alloc.id, "action": "RUN"}
        else:
            item = {
                "allocationId": alloc.id,
                "action": "RUN",
                "spec": allocations.container_spec(conn, st, alloc, agent_id),
            }
        if alloc.logs_watched and item["action"] == "RUN":
            item["logsWatched"] = True
        out.append(item)
    # Terminated allocations the agent still reports stay listed as KILL until it drops them,
    # so a container whose end we recorded is never restarted.
    listed = {a.id for a in desired}
    for aid, c in reported.items():
        if aid not in listed and c.get("state") != states.TERMINATED and aid in known:
            out.append({"allocationId": aid, "action": "KILL"})
    return {
        "clusterId": st.cluster_id,
        "enabled": row.enabled,
        "draining": row.draining,
        "heartbeatSeconds": 1.0,
        "containers": out,
    }


def keepalive_seconds(agent_timeout: float) -> float:
    """How long an agent holding its ``changes`` long-poll may stay silent while nothing it
    reports changed: a quarter of the agent timeout, between the 1 s pass and 10 s (7.5 s at the
    default 30: the agent sends a pass early, every 7 s, so the master hears from it four times
    within its timeout; the ratio of a Kubernetes node's lease renewal to the lease). Work placed
    on it or to kill reaches it by the long-poll, and any change of its containers is sent at
    the next pass, so a quiet agent costs the master a heartbeat every 7 s instead of every
    second (docs/internals.md, "Heartbeats"; a sixth of the timeout, a heartbeat every 5 s, cost
    the master 40% more of them at the same liveness: bench/scale.py)."""
    return min(10.0, max(1.0, agent_timeout / 4))


@dataclass(frozen=True, slots=True)
class _Upserted:
    """What the heartbeat's upsert of the agent's row answers."""

    enabled: bool
    draining: bool
    #: Whether the row is new (the agent registers).
    inserted: bool


def _changes_nothing(c: ContainerReport, row: allocation_rows.Allocation | None) -> bool:
    """Whether applying report ``c`` would change nothing: an allocation this master does not
    know, or one whose state and container the report repeats (a served task's port is applied
    each time: ``allocations.update_container``)."""
    if row is None:
        return True
    return (
        c.get("state") == row.state != states.TERMINATED
        and c.get("containerId") in (None, "", row.container_id)
        and not isinstance(c.get("proxyPort"), int)
    )


def _has_container(c: ContainerReport | None) -> bool:
    return c is not None and c.get("state") != states.TERMINATED


@dataclass(frozen=True, slots=True)
class _Slot:
    slot_id: str
    type: str
    uuid: str | None
    brand: str
    memory_mb: int


def _wanted_slots(slots: list[HeartbeatSlot]) -> dict[str, _Slot]:
    return {
        str(s["id"]): _Slot(
            str(s["id"]),
            str(s.get("type") or "cpu"),
            s.get("uuid"),
            str(s.get("brand") or ""),
            int(s.get("memoryMb") or 0),
        )
        for s in slots
    }


def _stored_slots(conn: Conn, agent_id: str) -> dict[str, _Slot]:
    return {
        r.slot_id: r
        for r in db.fetch_rows(
            conn,
            _Slot,
            "SELECT slot_id, type, uuid, brand, memory_mb FROM slots WHERE agent_id = %s",
            (agent_id,),
        )
    }


def _sync_slots(conn: Conn, agent_id: str, slots: list[HeartbeatSlot]) -> None:
    """Writes the slots that changed and deletes the ones gone: a heartbeat that repeats them
    (every one but the first) reads them once and writes nothing (no new row versions, no WAL).
    The agent's row, locked by the heartbeat's upsert, orders two heartbeats of one agent."""
    wanted = _wanted_slots(slots)
    have = _stored_slots(conn, agent_id)
    changed = [s for k, s in wanted.items() if have.get(k) != s]
    if changed:
        conn.execute(
            "INSERT INTO slots (agent_id, slot_id, type, uuid, brand, memory_mb)"
            " SELECT %s::text, * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::bigint[])"
            " ON CONFLICT (agent_id, slot_id) DO UPDATE SET type = EXCLUDED.type,"
            " uuid = EXCLUDED.uuid, brand = EXCLUDED.brand, memory_mb = EXCLUDED.memory_mb",
            (
                agent_id,
                [s.slot_id for s in changed],
                [s.type for s in changed],
                [s.uuid for s in changed],
                [s.brand for s in changed],
                [s.memory_mb for s in changed],
            ),
        )
    gone = [k for k in have if k not in wanted]
    if gone:
        conn.execute(
            "DELETE FROM slots WHERE agent_id = %s AND slot_id = ANY(%s)", (agent_id, gone)
        )


def _preempt_agent(conn: Conn, agent_id: str, notice: JSONObject) -> None:
    """A spot/preemptible machine is going away: checkpoint its trials and place nothing new."""
    updated = db.column(
        conn,
        str,
        "UPDATE allocations SET preempt_requested = true, exit_reason = coalesce(exit_reason, %s)"
        " WHERE placement ? %s AND state <> 'TERMINATED' AND NOT preempt_requested RETURNING id",
        (f"preempted: {notice.get('source', 'cloud')} notice", agent_id),
    )
    conn.execute("UPDATE agents SET draining = true WHERE id = %s AND NOT draining", (agent_id,))
    for allocation_id in updated:
        states.record_event(
            conn,
            "allocation",
            allocation_id,
            "preempt",
            f"agent {agent_id} got a {notice.get('source')} notice",
        )


def mark_lost(conn: Conn, timeout_seconds: float) -> list[str]:
    """Agents silent for longer than the timeout: their allocations end without a restart."""
    ids = db.column(
        conn,
        str,
        "UPDATE agents SET connected = false WHERE connected AND last_heartbeat < now() - make_interval(secs => %s)"
        " RETURNING id",
        (timeout_seconds,),
    )
    for agent_id in ids:
        states.record_event(
            conn, "agent", agent_id, "lost", f"no heartbeat for {timeout_seconds:.0f}s"
        )
        logger.warning("agent %s lost", agent_id)
        for allocation_id in db.column(
            conn,
            str,
            "SELECT id FROM allocations WHERE placement ? %s AND state <> 'TERMINATED'",
            (agent_id,),
        ):
            allocations.on_terminated(conn, allocation_id, None, containers.AGENT_LOST)
    return ids


def list_agents(conn: Conn) -> list[Agent]:
    agents = _rows(conn, AgentRow).execute(
        "SELECT id, resource_pool, version, labels, addresses, enabled, draining,"
        " preemption_notice, registered_at, last_heartbeat, connected FROM agents ORDER BY id"
    )
    slots = _rows(conn, SlotRow).execute(
        "SELECT agent_id, slot_id, type, uuid, brand, memory_mb, enabled FROM slots"
        " ORDER BY agent_id, slot_id"
    )
    live = (
        _rows(conn, LiveAllocation)
        .execute(
            "SELECT id, placement, state, task_id, container_id FROM allocations"
            " WHERE state <> 'TERMINATED' AND placement IS NOT NULL"
        )
        .fetchall()
    )
    by_agent: dict[str, list[SlotRow]] = {}
    for s in slots:
        by_agent.setdefault(s["agent_id"], []).append(s)
    out: list[Agent] = []
    for a in agents:
        used: dict[str, LiveAllocation] = {}
        for alloc in live:
            for sid in (alloc["placement"] or {}).get(a["id"], []):
                used[str(sid)] = alloc
        out.append({**a, "slots": by_agent.get(a["id"], []), "used": used})
    return out


def slot_devices(conn: Conn) -> dict[tuple[str, str], SlotDevice]:
    """Every slot's device, by (agent id, slot id)."""
    return {
        (s["agent_id"], s["slot_id"]): s
        for s in _rows(conn, SlotRow).execute(
            "SELECT agent_id, slot_id, type, uuid, brand, memory_mb, enabled FROM slots"
        )
    }


def set_enabled(conn: Conn, agent_id: str, enabled: bool, drain: bool = False) -> None:
    row = conn.execute(
        "UPDATE agents SET enabled = %s, draining = %s WHERE id = %s RETURNING id",
        (enabled, (not enabled) and drain, agent_id),
    ).fetchone()
    if row is None:
        raise NotFound(f"agent {agent_id} not found")
    if not enabled and not drain:
        # Disabling without drain stops the work on the agent (it is re-queued, not failed).
        conn.execute(
            "UPDATE allocations SET preempt_requested = true WHERE placement ? %s AND state <> 'TERMINATED'",
            (agent_id,),
        )
    states.record_event(
        conn,
        "agent",
        agent_id,
        "enabled" if enabled else "disabled",
        "by user" + (" (drain)" if drain else ""),
    )


def set_slot_enabled(conn: Conn, agent_id: str, slot_id: str, enabled: bool) -> None:
    row = conn.execute(
        "UPDATE slots SET enabled = %s WHERE agent_id = %s AND slot_id = %s RETURNING slot_id",
        (enabled, agent_id, slot_id),
    ).fetchone()
    if row is None:
        raise NotFound(f"slot {slot_id} on agent {agent_id} not found")
