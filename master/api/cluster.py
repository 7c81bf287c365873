"""``/info``, ``/health``, ``/api/v1/master``, the master's config and logs, and its wake-up URL."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from flask import Blueprint, Response, request, stream_with_context
from typing_extensions import TypedDict

import det
from det.master import logbuffer, wakeups
from det.master.api._common import PUBLIC, allow, db, require_admin, state
from det.master.api._contract import contract
from det.master.errors import InvalidArgument, Unauthenticated
from det.master.schemas import d
from det.master.services import health as health_svc
from det.master.services import wakeups as wakeups_svc

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


def _info() -> Info:
    st = state()
    return {
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
        "rbacEnabled": False,
        "strictJobQueueControl": False,
        "featureSwitches": [],
        "userManagementEnabled": True,
        "hasCustomLogo": False,
    }


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
    return {"config": state().config.redacted()}


@bp.get("/api/v1/master/logs")
@contract("MasterLogs")
def master_logs(params: d.MasterLogsParams) -> Any:
    """Determined's MasterLogs stream: NDJSON ``{"result": {"logEntry": …}}`` lines, the
    ``limit`` first after ``offset`` (a negative offset counts from the end), following new
    lines while ``follow=true``."""
    require_admin()

    offset = params.get("offset") or 0
    limit = params.get("limit") or 0
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
