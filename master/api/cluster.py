"""``/info``, ``/health``, ``/api/v1/master``, the master's config and logs, and its wake-up URL."""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Iterator

from flask import Blueprint, Response, request, stream_with_context
from typing_extensions import TypedDict

import det
from det.master import logbuffer, wakeups
from det.master.api._common import PUBLIC, allow, db, require_admin, state
from det.master.api._contract import contract
from det.master.errors import InvalidArgument, Unauthenticated
from det.master.schemas import d
from det.master.services import cluster_messages as messages
from det.master.services import health as health_svc
from det.master.services import master_settings
from det.master.services import task_container_policy as container_policies
from det.master.services import wakeups as wakeups_svc
from det.master.wire import Empty, Paging

logger = logging.getLogger(__name__)

# The Determined API version det speaks: its clients compare /info's ``version`` with their own
# and warn when the master's is older. det's own version is reported beside it.
DETERMINED_API_VERSION = "0.38.1"

bp = Blueprint("cluster", __name__)

_LOG_LEVELS = frozenset(
    "LOG_LEVEL_" + x for x in ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
)


class Info(d.v1GetMasterResponse, total=False):
    """``GetMaster`` with det's own version beside the Determined API version it speaks."""

    detVersion: str


class Health(TypedDict):
    healthy: bool
    database: str


def _wire_time(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def _wire_message(m: messages.ClusterMessage) -> d.v1ClusterMessage:
    out: d.v1ClusterMessage = {
        "message": m.message,
        "startTime": _wire_time(m.start_time),
        "createdTime": _wire_time(m.created_time),
    }
    if m.end_time is not None:
        out["endTime"] = _wire_time(m.end_time)
    return out


# /info is served without the database otherwise (agents and load balancers poll it): the
# message is read at most every few seconds per process, and left out while the database is down.
_MESSAGE_TTL = 5.0
_message_cache: tuple[float, d.v1ClusterMessage | None] = (0.0, None)


def _active_message() -> d.v1ClusterMessage | None:
    global _message_cache
    now = time.monotonic()
    if now - _message_cache[0] < _MESSAGE_TTL:
        return _message_cache[1]
    try:
        with state().pool.connection() as conn:
            m = messages.active(conn)
    except Exception as e:  # the database blinked: /info still answers
        logger.debug("cannot read the cluster message: %s", e)
        return _message_cache[1]
    _message_cache = (now, _wire_message(m) if m else None)
    return _message_cache[1]


def _info() -> Info:
    st = state()
    info: Info = {
        "version": DETERMINED_API_VERSION,
        "detVersion": det.__version__,
        "masterId": st.master_id,
        "clusterId": st.cluster_id,
        "clusterName": st.config.cluster_name,
        "telemetryEnabled": False,
        "ssoProviders": [],
        "externalLoginUri": None,
        "externalLogoutUri": None,
        "branding": "det",
        "rbacEnabled": True,  # roles and groups (det.master.authz), as Determined's RBAC
        "strictJobQueueControl": False,
        "featureSwitches": [],
        "userManagementEnabled": True,
        "hasCustomLogo": False,
    }
    message = _active_message()
    if message is not None:
        info["clusterMessage"] = message
    return info


@bp.get("/info")
@allow(PUBLIC)
@contract(response=Info)
def info() -> Info:
    return _info()


@bp.get("/health")
@allow(PUBLIC)
@contract(response=Health)
def health() -> Health:
    with db() as conn:
        health_svc.check_database(conn)
    return {"healthy": True, "database": "ok"}


class WakeupAnswer(TypedDict):
    woken: bool


@bp.post(wakeups.WAKEUP_PATH)
@allow(PUBLIC)
@contract(response=WakeupAnswer)
def wakeup() -> WakeupAnswer:
    """A scheduled wake-up (det.master.wakeups): the call itself starts an instance of a
    serverless master; this one tells the control loop's leader to run a pass now. Public by
    route, authenticated by the wake-up token (derived from the cluster's secret)."""
    if not wakeups.check_token(state().token_secret, request.headers.get(wakeups.TOKEN_HEADER)):
        raise Unauthenticated(f"wake-up: missing or wrong {wakeups.TOKEN_HEADER} header")
    with db() as conn:
        wakeups_svc.woken(conn)
    return {"woken": True}


@bp.get("/api/v1/master")
@allow(PUBLIC)
@contract("GetMaster", response=Info)
def master() -> Info:
    # Unauthenticated in Determined too: its CLI reads feature flags (rbacEnabled) before login.
    return _info()


@bp.get("/api/v1/master/config")
@contract("GetMasterConfig")
def master_config() -> d.v1GetMasterConfigResponse:
    require_admin()
    config = state().config.redacted()
    with db() as conn:
        _version, settings = master_settings.current(conn)
        # The policy in force: the one an admin stored, else master.yaml's.
        policy = container_policies.current(conn, state().config.task_container_policy)
    config["task_container_policy"] = container_policies.wire(policy.policy)
    log = config["log"]
    assert isinstance(log, dict)  # the config dumps its log block as a mapping
    if "log.level" in settings:
        log["level"] = settings["log.level"]
    if "log.color" in settings:
        log["color"] = settings["log.color"]
    return {"config": config}


_SETTABLE = ("log.level", "log.color")


@bp.patch("/api/v1/master/config")
@contract("PatchMasterConfig")
def patch_master_config(body: d.v1PatchMasterConfigRequest) -> Empty:
    """Determined's PatchMasterConfig: the fields its ``fieldMask`` names (``log.level``,
    ``log.color``) change in every master process on this database, without a restart."""
    require_admin()
    paths = list((body.get("fieldMask") or {}).get("paths") or [])
    if not paths:
        raise InvalidArgument("fieldMask.paths: name at least one of " + ", ".join(_SETTABLE))
    log = (body.get("config") or {}).get("log") or {}
    values: dict[str, str | bool] = {}
    for path in paths:
        if path == "log.level":
            level = log.get("level")
            if level not in master_settings.WIRE_LEVELS:
                raise InvalidArgument(
                    "config.log.level: must be one of "
                    + ", ".join(master_settings.WIRE_LEVELS)
                    + f" (got {level!r})"
                )
            values[path] = master_settings.WIRE_LEVELS[level]
        elif path == "log.color":
            values[path] = bool(log.get("color"))
        else:
            raise InvalidArgument(
                f"fieldMask.paths: {path!r} cannot be set at run time (only "
                + ", ".join(_SETTABLE)
                + ")"
            )
    with db() as conn:
        master_settings.put(conn, values)
    master_settings.apply(values)  # this process at once; the others on their next poll
    return {}


@bp.get("/api/v1/master/cluster_message")
@contract("GetClusterMessage")
def get_cluster_message() -> d.v1GetClusterMessageResponse:
    """The active message, for every signed-in user (absent when there is none)."""
    with db() as conn:
        m = messages.active(conn)
    return {"clusterMessage": _wire_message(m)} if m else {}


@bp.put("/api/v1/master/cluster_message")
@contract("SetClusterMessage")
def set_cluster_message(body: d.v1SetClusterMessageRequest) -> Empty:
    require_admin()
    text, start, end = messages.validate(
        body.get("message"),
        body.get("startTime"),
        body.get("endTime"),
        body.get("duration"),
        dt.datetime.now(dt.UTC),
    )
    with db() as conn:
        messages.set_message(conn, text, start, end)
    _forget_message()
    return {}


@bp.delete("/api/v1/master/cluster_message")
@contract("DeleteClusterMessage")
def delete_cluster_message() -> Empty:
    require_admin()
    with db() as conn:
        messages.clear(conn)
    _forget_message()
    return {}


def _forget_message() -> None:
    global _message_cache
    _message_cache = (0.0, None)


@bp.get("/api/v1/master/logs")
@contract("MasterLogs")
def master_logs(params: d.MasterLogsParams) -> Response:
    """Determined's MasterLogs stream: NDJSON ``{"result": {"logEntry": …}}`` lines, the
    ``limit`` first after ``offset`` (a negative offset counts from the end), following new
    lines while ``follow=true``."""
    require_admin()

    offset, limit = Paging.of(params)
    if limit < 0:
        raise InvalidArgument(f"limit: must not be negative (got {limit})")
    follow = bool(params.get("follow"))
    lines = logbuffer.recent()
    lines = lines[offset:] if offset >= 0 else lines[max(0, len(lines) + offset) :]
    if limit:
        lines = lines[:limit]

    budget = state().config.long_request_seconds()
    deadline = None if budget is None else time.monotonic() + budget

    def gen() -> Iterator[str]:
        sent, last = 0, 0
        batch = lines
        while True:
            for e in batch:
                last = e["id"]
                if e.get("level") not in _LOG_LEVELS:  # a custom logging level
                    e["level"] = "LOG_LEVEL_UNSPECIFIED"
                yield json.dumps({"result": {"logEntry": e}}) + "\n"
                sent += 1
                if limit and sent >= limit:
                    return
            if not follow or (deadline is not None and time.monotonic() >= deadline):
                return
            time.sleep(0.5)
            batch = logbuffer.recent(after=last)

    return Response(stream_with_context(gen()), mimetype="application/x-ndjson")
