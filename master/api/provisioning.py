"""Autoscaling views: a resource pool's provisioner events and its cloud instances."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, request

from det.master.api._common import db, state
from det.master.errors import NotFound
from det.master.services import provisioning as svc

bp = Blueprint("provisioning", __name__)


def _check_pool(name: str) -> None:
    if state().config.pool(name) is None:
        raise NotFound(f"no resource pool named '{name}'")


@bp.get("/api/v1/resource-pools/<name>/events")
def pool_events(name: str) -> Any:
    """Why the pool launched, terminated or is waiting, oldest first (``limit``: newest N)."""
    _check_pool(name)
    limit = max(1, min(int(request.args.get("limit", 100)), 1000))
    with db() as conn:
        return {"events": svc.pool_events(conn, name, limit)}


@bp.get("/api/v1/resource-pools/<name>/instances")
def pool_instances(name: str) -> Any:
    """Every instance the provisioner has seen in this pool, ended ones included."""
    _check_pool(name)
    with db() as conn:
        return {"instances": svc.pool_instances(conn, name)}
