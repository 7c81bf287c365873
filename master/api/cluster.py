"""``/info``, ``/health``, ``/api/v1/master`` and the master's config and logs."""

from __future__ import annotations

from typing import Any

from flask import Blueprint

import det
from det.master.api._common import PUBLIC, allow, db, require_admin, state

bp = Blueprint("cluster", __name__)


def _info() -> dict[str, Any]:
    st = state()
    return {
        "version": det.__version__,
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
def master() -> Any:
    return _info()


@bp.get("/api/v1/master/config")
def master_config() -> Any:
    require_admin()
    return {"config": state().config.redacted()}


@bp.get("/api/v1/master/logs")
def master_logs() -> Any:
    require_admin()
    from det.master import logbuffer

    lines = logbuffer.recent()
    return {"masterLogs": [{"id": i, "logEntry": e} for i, e in enumerate(lines)]}
