"""Endpoints a running task (and its agent) uses: preemption signals, context, task logs."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import functools
import math
import time
import urllib.parse

from flask import Blueprint, Response, request

from det.master import deferred, dispatch, limits, preemptwait, task_origin
from det.master.api import _access, _logs
from det.master.api._common import (
    AGENT,
    TASK,
    USER,
    _bearer,
    allow,
    check_task_scope,
    current_user,
    db,
    principal,
    reads,
    release_connection,
    state,
    statement,
)
from det.master.api._contract import contract
from det.master.errors import InvalidArgument, NotFound, Unauthenticated
from det.master.schemas import d
from det.master.schemas import tasks as wire
from det.master.services import preemption, task_services, users
from det.master.services import task_logs as task_logs_svc
from det.master.services import tasks as tasks_svc
from det.master.services import unmanaged as unmanaged_svc
from det.master.wire import Empty

bp = Blueprint("tasks", __name__)

# Clients loop on the long-poll; the server cuts a longer wait near this cap, at the
# allocation's phase of a cycle of this length (det.master.preemptwait.spread_wait): each poller
# asks once a cap, at its own instant. The harness asks 60 s, as Determined's master waits: a
# 30 s cap cost a master of 2,000 trials 67 polls a second instead of 33 (bench/scale.py); a
# platform's shorter request limit still cuts them (``long_request_seconds``).
MAX_LONG_POLL_SECONDS = 60.0


def _long_poll_timeout(raw: str | None) -> float:
    """A finite number of seconds >= 0; NaN, infinities and negatives are refused (a NaN would
    make the wait loop never sleep).

    Determined's client sends ``timeoutSeconds`` (an integer, checked by the contract); det's
    harness sends the proto name ``timeout_seconds``, which the gateway accepts too."""
    try:
        value = float(raw or 0)
    except ValueError:
        raise InvalidArgument("timeout_seconds: must be a number") from None
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument("timeout_seconds: must be a finite number >= 0")
    return value


@bp.get("/api/v1/allocations/<allocation_id>/signals/preemption")
@allow(TASK, USER)
@contract("AllocationPreemptionSignal")
def preemption_signal(
    allocation_id: str, params: d.AllocationPreemptionSignalParams
) -> d.v1AllocationPreemptionSignalResponse:
    camel = params.get("timeoutSeconds")
    if camel is not None:
        timeout = _long_poll_timeout(str(camel))
    else:
        timeout = _long_poll_timeout(request.args.get("timeout_seconds"))
    # A wait the cap cuts ends at the allocation's phase, so trials started together do not
    # ask again together at every cap.
    timeout = preemptwait.spread_wait(allocation_id, timeout, MAX_LONG_POLL_SECONDS, time.time())
    # Reads only, each statement on its own: a transaction would cost a BEGIN and a COMMIT
    # round trip here and at every read of the row (when woken, and at the end).
    with reads() as conn:
        _access.allocation(conn, allocation_id)
    # Before the platform's request time limit, if any: the client asks again.
    timeout = state().config.long_request_seconds(timeout) or 0.0
    # With api_park_without_thread a wait holds no thread: the request parks and is served again
    # from here when woken or at its deadline, its first run's (det.master.deferred).
    parking = deferred.current(request.environ) if timeout > 0 else None
    deadline = parking.deadline(timeout) if parking is not None else time.monotonic() + timeout
    # Woken by the allocation's notification (det.master.preemptwait), registered before the
    # first read so that no change slips between a read and the wait.
    waiters = preemptwait.waiters(str(state().pool.conninfo)) if timeout > 0 else None
    woken = (
        waiters.register(allocation_id, deferred.Resume() if parking is not None else None)
        if waiters is not None
        else None
    )
    kept = False  # registered still: the request parked, and unregisters when resumed
    # Otherwise parked from the first wait to the answer (the pool runs one more thread
    # meanwhile), not once per read: each park and unpark starts or stops a thread of the
    # pool. A read when woken is short work on a pooled connection given back before waiting
    # again.
    try:
        with contextlib.ExitStack() as stack:
            parked = False
            while True:
                if woken is not None:
                    woken.clear()
                with reads() as conn:
                    row = preemption.signal(conn, allocation_id)
                if row is None:
                    raise NotFound(f"allocation {allocation_id} not found")
                if row.preempt_requested or row.state == "TERMINATED":
                    return {"preempt": True}
                left = deadline - time.monotonic()
                if left <= 0 or waiters is None or woken is None:
                    return {"preempt": False}
                release_connection()  # no pooled connection is held while waiting
                if parking is not None and isinstance(woken, deferred.Resume):
                    kept = True
                    done = functools.partial(waiters.unregister, allocation_id, woken)
                    # Served again by the word, at the deadline, or to read the row again
                    # while nobody listens (a lost connection: no word would come).
                    until = min(deadline, time.monotonic() + waiters.wait_seconds())
                    parking.park(woken, until, done)
                    kept = False  # could not park (woken meanwhile: look again): wait here
                if not parked:  # nor one of the threads that serve the other requests
                    stack.enter_context(dispatch.parked())
                    parked = True
                woken.wait(min(waiters.wait_seconds(), left))
    finally:
        if waiters is not None and woken is not None and not kept:
            waiters.unregister(allocation_id, woken)


@bp.post("/api/v1/allocations/<allocation_id>/signals/ack_preemption")
@allow(TASK)
@contract("AckAllocationPreemptionSignal")
def ack_preemption(allocation_id: str, body: d.v1AckAllocationPreemptionSignalRequest) -> Empty:
    check_task_scope(allocation_id=allocation_id)
    with db() as conn:
        preemption.acknowledge(conn, allocation_id)
    return {}


@bp.post("/api/v1/allocations/<allocation_id>/signals/pending_preemption")
@allow(TASK)
@contract("AllocationPendingPreemptionSignal")
def report_pending_preemption(
    allocation_id: str, body: d.v1AllocationPendingPreemptionSignalRequest
) -> Empty:
    """Determined's ``AllocationPendingPreemptionSignal``: the task learnt (from its host's
    scheduler) that it is about to be preempted; the allocation is asked to checkpoint and
    exit, as a preemption by det's own scheduler would."""
    check_task_scope(allocation_id=allocation_id)
    with db() as conn:
        preemption.report_pending(conn, allocation_id)
    return {}


@bp.get("/api/v1/allocations/<allocation_id>/signals/pending_preemption")
@allow(TASK, USER)
@contract(response=wire.PendingPreemption)
def pending_preemption(allocation_id: str) -> wire.PendingPreemption:
    """det's read of whether a preemption is pending (the signal without the long poll)."""
    with reads() as conn:
        _access.allocation(conn, allocation_id)
        row = preemption.signal(conn, allocation_id)
    if row is None:
        raise NotFound(f"allocation {allocation_id} not found")
    return {"preempt": row.preempt_requested}


@bp.post("/api/v1/allocations/<allocation_id>/proxy_address")
@allow(TASK)
@contract("PostAllocationProxyAddress")
def proxy_address(allocation_id: str, body: d.v1PostAllocationProxyAddressRequest) -> Empty:
    check_task_scope(allocation_id=allocation_id)
    return {}


@bp.post("/api/v1/allocations/<allocation_id>/notify_container_running")
@allow(TASK)
@contract("NotifyContainerRunning")
def notify_container_running(
    allocation_id: str, body: d.v1NotifyContainerRunningRequest
) -> d.v1NotifyContainerRunningResponse:
    check_task_scope(allocation_id=allocation_id)
    return {"data": []}


def _context(task_id: str) -> d.v1GetTaskContextDirectoryResponse:
    check_task_scope(task_id=task_id)
    with db() as conn:
        archive = tasks_svc.context(conn, task_id)
    return {"b64Tgz": base64.b64encode(archive).decode()}


@bp.get("/api/v1/tasks/<task_id>/context_directory")
@allow(AGENT, TASK, USER)
@contract("GetTaskContextDirectory")
def context_directory(task_id: str) -> d.v1GetTaskContextDirectoryResponse:
    return _context(task_id)


@bp.get("/api/v1/tasks/<task_id>/context")
@allow(AGENT, TASK, USER)
@contract(response=d.v1GetTaskContextDirectoryResponse)
def context(task_id: str) -> d.v1GetTaskContextDirectoryResponse:
    """det's name for ``GetTaskContextDirectory`` (its agent fetches a task's files here)."""
    return _context(task_id)


@bp.post("/api/v1/task/logs")
@allow(AGENT, TASK)
@contract("PostTaskLogs")
def post_logs(body: d.v1PostTaskLogsRequest) -> Empty:
    logs = body.get("logs")
    if logs is None:
        raise InvalidArgument("logs: required list")
    rows = []
    p = principal()
    for i, entry in enumerate(logs):
        task_id, log = entry.get("taskId"), entry.get("log")
        if task_id is None or log is None:
            raise InvalidArgument(f"logs[{i}]: taskId and log are required")
        if p.task is not None and task_id != p.task.task_id:
            check_task_scope(task_id=task_id)
        stamp = entry.get("timestamp")
        try:
            when = (
                dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
                if stamp
                else dt.datetime.now(dt.UTC)
            )
        except (ValueError, AttributeError):
            raise InvalidArgument(f"logs[{i}].timestamp: not an RFC 3339 time") from None
        rows.append(
            (
                task_id,
                entry.get("allocationId"),
                entry.get("agentId"),
                entry.get("containerId"),
                entry.get("rankId"),
                limits.log_line(log),
                entry.get("level"),
                entry.get("stdtype"),
                entry.get("source"),
                when,
            )
        )
    # One statement outside a transaction; in one with the events when a trigger watches logs.
    if task_logs_svc.insert_unless_hooked(statement(), rows):
        return {}
    with db() as conn:
        task_logs_svc.insert(conn, rows)
    return {}


@bp.post("/task-logs")
@contract(body=list[wire.LegacyTaskLog])
def post_legacy_logs(body: list[wire.LegacyTaskLog]) -> Empty:
    """Determined's ``POST /task-logs``, where an unmanaged (core_v2) script ships its output
    with its owner's session token: only into unmanaged trials the caller may change."""
    rows = []
    with db() as conn:
        allowed: set[str] = set()
        for i, entry in enumerate(body):
            task_id = entry["task_id"]
            if task_id not in allowed:
                trial = unmanaged_svc.trial_of_task(conn, task_id)
                if trial is None:
                    raise NotFound(f"[{i}].task_id: no unmanaged trial has task id {task_id!r}")
                _access.trial(conn, trial.id)
                allowed.add(task_id)
            rank = _legacy_rank(entry.get("rank"), f"[{i}].rank")
            rows.append(
                (
                    task_id,
                    None,
                    None,
                    None,
                    rank,
                    limits.log_line(entry["log"]),
                    None,
                    None,
                    None,
                    _when(entry.get("timestamp"), f"[{i}].timestamp"),
                )
            )
        task_logs_svc.insert(conn, rows)
    return {}


def _legacy_rank(rank: str | None, field: str) -> int | None:
    """Determined's shipper sends the rank as text: digits are the rank, anything else none;
    a rank past a 32-bit integer (the column's type) is refused."""
    if rank is None or not (rank.isascii() and rank.isdigit()):
        return None
    value = int(rank)
    if value > 2**31 - 1:
        raise InvalidArgument(f"{field}: {rank} is past the largest rank, {2**31 - 1}")
    return value


def _when(stamp: str | None, field: str) -> dt.datetime:
    if not stamp:
        return dt.datetime.now(dt.UTC)
    try:
        return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(f"{field}: not an RFC 3339 time") from None


@bp.get("/api/v1/tasks")
@contract("GetTasks")
def list_tasks() -> d.v1GetTasksResponse:
    """Determined's ``GetTasks``: the live allocations (trials and checkpoint-GC tasks)."""
    with db() as conn:
        return {"allocationIdToSummary": tasks_svc.live_allocations(conn)}


@bp.get("/api/v1/tasks/<task_id>")
@contract("GetTask")
def get_task(task_id: str) -> d.v1GetTaskResponse:
    """Determined's ``GetTask``: a task and its allocations (newest first), ``isReady`` once
    an interactive task's service is up."""
    with db() as conn:
        _access.read_task(conn, task_id)
        return {"task": tasks_svc.task_view(conn, task_id)}


@bp.post("/api/v1/proxy_tickets")
@contract(body=wire.ProxyTicketRequest, response=wire.ProxyTicket)
def proxy_ticket(body: wire.ProxyTicketRequest) -> wire.ProxyTicket:
    """det's: a ticket that opens an interactive task's page in a browser, once, within a
    minute, and ``url``, the task's address on its own origin (det.master.task_origin) with the
    ticket (the proxy trades it for a cookie for that task on that origin)."""
    st = state()
    task_id = body["taskId"]
    with db() as conn:
        digest = users.token_digest(_bearer(request.headers.get("Authorization")) or "")
        session = task_services.session_id(conn, digest)
        if session is None:
            raise Unauthenticated("a ticket is given to a session token (det user login)")
        ticket = tasks_svc.proxy_ticket(conn, st, task_id, current_user(), session)
    base = task_origin.origin(st.config, st.task_port, request.host, task_id)
    query = urllib.parse.urlencode({task_origin.TICKET: ticket})
    return {"ticket": ticket, "url": f"{base}/proxy/{task_id}/?{query}"}


@bp.get("/api/v1/tasks/<task_id>/logs")
@contract("TaskLogs")
def task_logs(task_id: str, params: d.TaskLogsParams) -> Response:
    """A task's log lines, for whoever may read the task (404 for no such task, as
    Determined answers)."""
    with db() as conn:
        _access.read_task(conn, task_id)
    return _logs.stream(task_id)
