"""Resource pools as Determined's ``v1ResourcePool`` (configuration plus live slot counts)."""

from __future__ import annotations

from dataclasses import dataclass

from det.master import db
from det.master.db import Conn
from det.master.handles import MasterState
from det.master.rows.pools import PoolCounts
from det.master.schemas import d
from det.master.schemas.pools import resource_pool


@dataclass(frozen=True, slots=True)
class _Used:
    resource_pool: str
    used: int  # sum() of an int column is a bigint


def list_pools(conn: Conn, st: MasterState) -> list[d.v1ResourcePool]:
    counts = {
        r.resource_pool: r
        for r in db.fetch_rows(
            conn,
            PoolCounts,
            "SELECT a.resource_pool, count(DISTINCT a.id) AS agents,"
            " count(s.slot_id) FILTER (WHERE s.enabled) AS slots, max(s.type) AS slot_type"
            " FROM agents a LEFT JOIN slots s ON s.agent_id = a.id"
            " WHERE a.connected GROUP BY a.resource_pool",
        )
    }
    used = {
        r.resource_pool: int(r.used)
        for r in db.fetch_rows(
            conn,
            _Used,
            "SELECT resource_pool, coalesce(sum(slots_needed), 0) AS used FROM allocations"
            " WHERE state NOT IN ('PENDING','TERMINATED') GROUP BY resource_pool",
        )
    }
    rm = st.config.resource_manager
    return [
        resource_pool(
            p,
            scheduler=p.scheduler or rm.scheduler,
            counts=counts.get(p.pool_name),
            used=used.get(p.pool_name, 0),
            default_compute=p.pool_name == rm.default_compute_resource_pool,
            default_aux=p.pool_name == rm.default_aux_resource_pool,
            master_url=st.config.url(),
            cluster_name=st.config.cluster_name,
        )
        for p in st.config.resource_pools
    ]
