"""Autoscaling views: a resource pool's provisioner events and its cloud instances."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, request

from det.master.api._common import db, state
from det.master.db import Conn
from det.master.errors import NotFound

bp = Blueprint("provisioning", __name__)


def pool_events_of(conn: Conn, pool: str, limit: int = 100) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT id, kind, message, created_at FROM events WHERE entity = 'pool' AND entity_id = %s"
        " ORDER BY id DESC LIMIT %s",
        (pool, limit),
    ).fetchall()
    return [
        {
            "id": r["id"],
            "kind": r["kind"],
            "message": r["message"],
            "time": r["created_at"].isoformat(),
        }
        for r in reversed(rows)
    ]


def pool_instances_of(conn: Conn, pool: str) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT * FROM instances WHERE resource_pool = %s ORDER BY launched_at, id", (pool,)
    ).fetchall()
    return [
        {
            "id": r["id"],
            "instanceType": r["instance_type"],
            "zone": r["zone"],
            "market": r["market"],
            "state": r["state"],
            "launchedAt": r["launched_at"].isoformat(),
            "terminatedAt": r["terminated_at"].isoformat() if r["terminated_at"] else None,
            "reason": r["reason"],
            "optionIndex": r["option_index"],
        }
        for r in rows
    ]


def _check_pool(name: str) -> None:
    if state().config.pool(name) is None:
        raise NotFound(f"no resource pool named '{name}'")


@bp.get("/api/v1/resource-pools/<name>/events")
def pool_events(name: str) -> Any:
    """Why the pool launched, terminated or is waiting, oldest first (``limit``: newest N)."""
    _check_pool(name)
    limit = max(1, min(int(request.args.get("limit", 100)), 1000))
    with db() as conn:
        return {"events": pool_events_of(conn, name, limit)}


@bp.get("/api/v1/resource-pools/<name>/instances")
def pool_instances(name: str) -> Any:
    """Every instance the provisioner has seen in this pool, ended ones included."""
    _check_pool(name)
    with db() as conn:
        return {"instances": pool_instances_of(conn, name)}
