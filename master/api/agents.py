"""Agents: the heartbeat protocol (docs/internals.md) and ``det agent``/``det slot`` views."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import math
import threading
import time
from collections.abc import Iterator

from flask import Blueprint, request

from det.common import agent_protocol as protocol
from det.master import deferred, dispatch, preemptwait
from det.master.api._common import (
    AGENT,
    PUBLIC,
    allow,
    db,
    pagination,
    require_admin,
    state,
    statement,
)
from det.master.api._contract import contract
from det.master.errors import InvalidArgument, NotFound
from det.master.schemas import agents as wire
from det.master.schemas import d
from det.master.services import agents as svc
from det.master.services import enrollment
from det.master.wire import Paging

bp = Blueprint("agents", __name__)


@bp.post("/api/v1/agents/<agent_id>/heartbeat")
@allow(AGENT)
@contract(body=protocol.HeartbeatRequest, response=protocol.HeartbeatResponse)
def heartbeat(agent_id: str, body: protocol.HeartbeatRequest) -> protocol.HeartbeatResponse:
    # Outside a transaction: a quiet heartbeat's statements each on their own (svc.heartbeat).
    answer = svc.heartbeat(statement(), state(), agent_id, body)
    # How long the master waits for the next heartbeat: the agent stops its containers a little
    # before that when it cannot reach the master (det.agent.reconcile.fence_after).
    timeout = state().config.agent_timeout_seconds
    answer["agentTimeoutSeconds"] = timeout
    answer["keepaliveSeconds"] = svc.keepalive_seconds(timeout)
    return answer


@bp.post("/api/v1/agent_enrollments")
@allow(PUBLIC)
@contract(body=protocol.EnrollmentRequest, response=protocol.EnrollmentResponse)
def enroll(body: protocol.EnrollmentRequest) -> protocol.EnrollmentResponse:
    """A cloud agent's one-time ticket for its own token (det.master.services.enrollment):
    public, as the ticket is the credential; a spent, expired or unknown one gets 401."""
    with db() as conn:
        token = enrollment.exchange(
            conn, body["ticket"], body["agentId"], state().agent_token, dt.datetime.now(dt.UTC)
        )
    return {"agentToken": token}


# Longest wait an agent may ask for (it asks again). A wait parks (det.master.dispatch: the pool
# grows by a thread meanwhile); one that cannot park would hold one of the pool's own threads, and
# those waits may hold at most this share of them (past it a wait answers at once and the agent
# heartbeats at every pass).
MAX_WAIT_SECONDS = 30.0
_WAIT_SHARE = 4
_waiting = 0
_waiting_lock = threading.Lock()


@bp.get("/api/v1/agents/<agent_id>/changes")
@allow(AGENT)
@contract(params=protocol.ChangesParams, response=protocol.ChangesResponse)
def changes(agent_id: str, params: protocol.ChangesParams) -> protocol.ChangesResponse:
    """Waits until an allocation is placed on the agent or one of its allocations is to be
    killed (det.master.preemptwait, migration 0033), at most ``timeoutSeconds``. Holds no
    database connection; a missed word costs the agent's next regular heartbeat."""
    timeout = params.get("timeoutSeconds", 0.0)
    if not math.isfinite(timeout) or timeout < 0:
        raise InvalidArgument(
            f"timeoutSeconds: must be a finite number >= 0 (at most {MAX_WAIT_SECONDS:g})"
        )
    cfg = state().config
    timeout = cfg.long_request_seconds(min(timeout, MAX_WAIT_SECONDS)) or 0.0
    parking = deferred.current(request.environ) if timeout > 0 else None
    if parking is not None:
        # With api_park_without_thread the wait holds no thread: the request parks and is served
        # again from here when woken or at its deadline, its first run's (det.master.deferred).
        deadline = parking.deadline(timeout)
        if parking.woken:
            return {"changed": True}
        if time.monotonic() >= deadline:
            return {"changed": False}
        waiters = preemptwait.waiters(str(state().pool.conninfo), preemptwait.AGENT_CHANNEL)
        token = deferred.Resume()
        waiters.register(agent_id, token)
        parking.park(token, deadline, functools.partial(waiters.unregister, agent_id, token))
        # It could not park: the word came meanwhile, or the request cannot (a body, another
        # request queued behind it on its connection).
        waiters.unregister(agent_id, token)
        if token.is_set():
            return {"changed": True}
        timeout = max(0.0, deadline - time.monotonic())
    with dispatch.parking() as own_thread:
        if own_thread:
            return {"changed": _wait_for_work(agent_id, timeout)}
        threads = dispatch.worker_threads(cfg.api_threads)
        with _pool_share(max(1, threads // _WAIT_SHARE)) as admitted:
            return {"changed": admitted and _wait_for_work(agent_id, timeout)}


@contextlib.contextmanager
def _pool_share(limit: int) -> Iterator[bool]:
    """One of at most ``limit`` waits holding a thread of the pool at once (False: none left)."""
    global _waiting
    with _waiting_lock:
        if _waiting >= limit:
            admitted = False
        else:
            _waiting += 1
            admitted = True
    try:
        yield admitted
    finally:
        if admitted:
            with _waiting_lock:
                _waiting -= 1


def _wait_for_work(agent_id: str, timeout: float) -> bool:
    waiters = preemptwait.waiters(str(state().pool.conninfo), preemptwait.AGENT_CHANNEL)
    woken = waiters.register(agent_id)
    try:
        return bool(woken.wait(timeout))
    finally:
        waiters.unregister(agent_id, woken)


def _agent(agent_id: str) -> wire.Agent:
    with db() as conn:
        found = [a for a in svc.list_agents(conn) if a["id"] == agent_id]
    if not found:
        raise NotFound(f"agent {agent_id} not found")
    return wire.agent(found[0])


def _slot(agent_id: str, slot_id: str) -> d.v1Slot:
    for s in (_agent(agent_id).get("slots") or {}).values():
        if s.get("id") == slot_id:
            return s
    raise NotFound(f"slot {slot_id} on agent {agent_id} not found")


@bp.get("/api/v1/agents")
@contract("GetAgents", response=wire.GetAgentsResponse)
def list_(params: d.GetAgentsParams) -> wire.GetAgentsResponse:
    with db() as conn:
        rows = [a for a in svc.list_agents(conn) if a["connected"]]
    agents = [wire.agent(a) for a in rows]
    if params.get("sortBy") == "SORT_BY_TIME":
        agents.sort(key=lambda a: a.get("registeredTime") or "")
    if params.get("orderBy") == "ORDER_BY_DESC":
        agents.reverse()
    for a in agents:
        if params.get("excludeSlots"):
            a["slots"] = None
        if params.get("excludeContainers"):
            a["containers"] = None
    offset, limit = Paging.of(params)
    page = agents[offset : (offset + limit) if limit > 0 else None]
    return {"agents": page, "pagination": pagination(offset, limit, len(agents))}


@bp.get("/api/v1/agents/<agent_id>")
@contract("GetAgent", response=wire.GetAgentResponse)
def get(agent_id: str) -> wire.GetAgentResponse:
    return {"agent": _agent(agent_id)}


@bp.get("/api/v1/agents/<agent_id>/slots")
@contract("GetSlots")
def slots(agent_id: str) -> d.v1GetSlotsResponse:
    return {"slots": list((_agent(agent_id).get("slots") or {}).values())}


@bp.get("/api/v1/agents/<agent_id>/slots/<slot_id>")
@contract("GetSlot")
def slot(agent_id: str, slot_id: str) -> d.v1GetSlotResponse:
    return {"slot": _slot(agent_id, slot_id)}


@bp.post("/api/v1/agents/<agent_id>/enable")
@contract("EnableAgent", response=wire.EnableAgentResponse)
def enable(agent_id: str) -> wire.EnableAgentResponse:
    require_admin()
    with db() as conn:
        svc.set_enabled(conn, agent_id, True)
    return {"agent": _agent(agent_id)}


@bp.post("/api/v1/agents/<agent_id>/disable")
@contract("DisableAgent", response=wire.EnableAgentResponse)
def disable(agent_id: str, body: d.v1DisableAgentRequest) -> wire.EnableAgentResponse:
    require_admin()
    with db() as conn:
        svc.set_enabled(conn, agent_id, False, bool(body.get("drain")))
    return {"agent": _agent(agent_id)}


@bp.post("/api/v1/agents/<agent_id>/slots/<slot_id>/enable")
@contract("EnableSlot")
def enable_slot(agent_id: str, slot_id: str) -> d.v1EnableSlotResponse:
    require_admin()
    with db() as conn:
        svc.set_slot_enabled(conn, agent_id, slot_id, True)
    return {"slot": _slot(agent_id, slot_id)}


@bp.post("/api/v1/agents/<agent_id>/slots/<slot_id>/disable")
@contract("DisableSlot")
def disable_slot(
    agent_id: str, slot_id: str, body: d.v1DisableSlotRequest
) -> d.v1DisableSlotResponse:
    require_admin()
    with db() as conn:
        svc.set_slot_enabled(conn, agent_id, slot_id, False)
    return {"slot": _slot(agent_id, slot_id)}
