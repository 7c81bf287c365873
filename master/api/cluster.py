"""``/info``, ``/health``, ``/api/v1/master`` and the master's config and logs."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from flask import Blueprint, Response, request, stream_with_context

import det
from det.master.api._common import PUBLIC, allow, db, int_arg, require_admin, state
from det.master.errors import InvalidArgument

# The Determined API version det speaks: its clients compare /info's ``version`` with their own
# and warn when the master's is older. det's own version is reported beside it.
DETERMINED_API_VERSION = "0.38.1"

bp = Blueprint("cluster", __name__)


def _info() -> dict[str, Any]:
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
def info() -> Any:
    return _info()


@bp.get("/health")
@allow(PUBLIC)
def health() -> Any:
    with db() as conn:
        conn.execute("SELECT 1")
    return {"healthy": True, "database": "ok"}


@bp.get("/api/v1/master")
@allow(PUBLIC)
def master() -> Any:
    # Unauthenticated in Determined too: its CLI reads feature flags (rbacEnabled) before login.
    return _info()


@bp.get("/api/v1/master/config")
def master_config() -> Any:
    require_admin()
    return {"config": state().config.redacted()}


@bp.get("/api/v1/master/logs")
def master_logs() -> Any:
    """Determined's MasterLogs stream: NDJSON ``{"result": {"logEntry": …}}`` lines, the
    ``limit`` first after ``offset`` (a negative offset counts from the end), following new
    lines while ``follow=true``."""
    require_admin()
    from det.master import logbuffer

    offset = int_arg("offset", 0) or 0
    limit = int_arg("limit", 0) or 0
    if limit < 0:
        raise InvalidArgument(f"limit: must not be negative (got {limit})")
    follow = request.args.get("follow", "false").lower() == "true"
    lines = logbuffer.recent()
    lines = lines[offset:] if offset >= 0 else lines[max(0, len(lines) + offset) :]
    if limit:
        lines = lines[:limit]

    def gen() -> Iterator[str]:
        sent, last = 0, 0
        batch = lines
        while True:
            for e in batch:
                last = e["id"]
                yield json.dumps({"result": {"logEntry": e}}) + "\n"
                sent += 1
                if limit and sent >= limit:
                    return
            if not follow:
                return
            time.sleep(0.5)
            batch = logbuffer.recent(after=last)

    return Response(stream_with_context(gen()), mimetype="application/x-ndjson")
