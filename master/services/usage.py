"""What the usage and cost reports read: allocations that held slots in a window, with who and
what they were for, and the machines they ran on with their pools' prices: cloud instances, and
the static agents of pools with a ``price`` (:mod:`det.master.usage` does the arithmetic)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from psycopg.rows import args_row

from det.common.jsontypes import JSONValue
from det.master import db
from det.master.config import MasterConfig, PoolPrice
from det.master.db import Conn
from det.master.provisioner.cost import CostPolicy
from det.master.provisioner.provider import Market
from det.master.usage import Hold, Machine

# One row per allocation placed before the window's end and not ended before its start, with
# its kind (TRIAL, an interactive task's kind, or CHECKPOINT_GC: the allocation's own column).
_HOLDS = """
SELECT a.id, a.task_id, a.trial_id, a.resource_pool, a.slots_needed, a.placement,
       a.placed_at, a.ended_at,
       a.kind,
       j.experiment_id, u.id AS user_id, u.username,
       coalesce(e.labels, '[]'::jsonb) AS labels,
       coalesce(w.name, nw.name, '') AS workspace
  FROM allocations a
  JOIN jobs j ON j.id = a.job_id
  LEFT JOIN users u ON u.id = j.owner_id
  LEFT JOIN experiments e ON e.id = j.experiment_id
  LEFT JOIN projects p ON p.id = e.project_id
  LEFT JOIN workspaces w ON w.id = p.workspace_id
  LEFT JOIN ntsc_tasks n ON n.job_id = j.id
  LEFT JOIN workspaces nw ON nw.id = n.workspace_id
 WHERE a.placed_at IS NOT NULL AND a.placed_at < %(end)s
   AND (a.ended_at IS NULL OR a.ended_at > %(start)s)
   {extra}
 ORDER BY a.placed_at, a.id
"""

_MACHINES = """
SELECT i.id, i.resource_pool, i.instance_type, i.market, i.launched_at, i.terminated_at,
       (SELECT count(*) FROM slots s WHERE s.agent_id = i.id) AS slots
  FROM instances i
 WHERE i.launched_at < %(end)s AND (i.terminated_at IS NULL OR i.terminated_at > %(start)s)
 ORDER BY i.launched_at, i.id
"""


@dataclass(frozen=True, slots=True)
class _Instance:
    """A row of :data:`_MACHINES`: an instance and its agent's slots (0 before it registered)."""

    id: str
    resource_pool: str
    instance_type: str
    market: str
    launched_at: dt.datetime
    terminated_at: dt.datetime | None
    slots: int


@dataclass(frozen=True, slots=True)
class _AgentSlots:
    id: str
    slots: int


def _hold(
    id: str,
    task_id: str,
    trial_id: int | None,
    resource_pool: str,
    slots_needed: int,
    placement: dict[str, list[str]] | None,
    placed_at: dt.datetime,
    ended_at: dt.datetime | None,
    kind: str,
    experiment_id: int | None,
    user_id: int | None,
    username: str | None,
    labels: list[JSONValue],
    workspace: str,
) -> Hold:
    """A row of ``_HOLDS``, its columns in order."""
    return Hold(
        allocation_id=id,
        task_id=task_id,
        kind=kind,
        pool=resource_pool,
        slots=int(slots_needed),
        start=placed_at,
        end=ended_at,
        placement={str(k): len(v) for k, v in (placement or {}).items()},
        experiment_id=experiment_id,
        trial_id=trial_id,
        user_id=user_id,
        username=username or "",
        labels=tuple(str(x) for x in labels or []),
        workspace=workspace,
    )


def holds(
    conn: Conn, start: dt.datetime, end: dt.datetime, experiment_id: int | None = None
) -> list[Hold]:
    """Allocations that held slots at some time in ``[start, end)`` (of one experiment, its
    trials and its checkpoint GC, when ``experiment_id`` is given)."""
    extra = "AND j.experiment_id = %(experiment_id)s" if experiment_id is not None else ""
    cur = conn.cursor(row_factory=args_row(_hold))
    return cur.execute(
        _HOLDS.format(extra=extra),  # type: ignore[arg-type]  # a constant, no user text
        {"start": start, "end": end, "experiment_id": experiment_id},
    ).fetchall()


def policies(config: MasterConfig) -> dict[str, CostPolicy]:
    """Each cloud pool's price table (``provider.cost``), for the pools that have one."""
    out = {}
    for p in config.resource_pools:
        pc = p.provider_config
        if pc is not None and pc.cost is not None and (pc.cost.prices or pc.cost.spot_prices):
            out[p.pool_name] = pc.cost.policy()
    return out


def _launch_slots(config: MasterConfig, pool: str, instance_type: str) -> int:
    p = config.pool(pool)
    pc = p.provider_config if p is not None else None
    if pc is None:
        return 0
    return max(
        (o.slots for o in pc.launch_options() if o.instance_type == instance_type), default=0
    )


_AGENT_SLOTS = """
SELECT a.id, (SELECT count(*) FROM slots s WHERE s.agent_id = a.id) AS slots
  FROM agents a
 WHERE a.id = ANY(%(ids)s)
"""


def machines(
    conn: Conn,
    config: MasterConfig,
    start: dt.datetime,
    end: dt.datetime,
    holds: Iterable[Hold] = (),
) -> dict[str, Machine]:
    """The cloud instances that ran at some time in ``[start, end)``, priced by their pool's
    ``provider.cost`` or ``price`` (neither: ``hourly_usd`` None); and the static agents that
    ``holds`` were placed on in pools with a ``price``. A machine's slots are its agent's;
    before its agent registered, its launch option's."""
    prices = policies(config)
    out = {}
    for r in db.fetch_rows(conn, _Instance, _MACHINES, {"start": start, "end": end}):
        pool = r.resource_pool
        market = Market(r.market)
        policy = prices.get(pool)
        flat = _price(config, pool)
        slots = int(r.slots) or _launch_slots(config, pool, r.instance_type)
        hourly = None
        if policy is not None:
            hourly = policy.price(r.instance_type, market)
        elif flat is not None:
            hourly = flat.hourly(slots)
        out[r.id] = Machine(
            id=r.id,
            pool=pool,
            instance_type=r.instance_type,
            market=market,
            launched_at=r.launched_at,
            ended_at=r.terminated_at,
            slots=slots,
            hourly_usd=hourly,
        )
    out.update(_static_agents(conn, config, holds, set(out)))
    return out


def _price(config: MasterConfig, pool: str) -> PoolPrice | None:
    p = config.pool(pool)
    return p.price if p is not None else None


def _static_agents(
    conn: Conn, config: MasterConfig, holds: Iterable[Hold], instances: set[str]
) -> dict[str, Machine]:
    """The agents of priced pools that ``holds`` ran on and no cloud instance is: priced by
    their slots (``price.hourly``), as if they lived for ever (no idle part is counted)."""
    held: dict[str, tuple[str, PoolPrice, int]] = {}  # agent -> pool, price, most slots held
    for h in holds:
        price = _price(config, h.pool)
        if price is None:
            continue
        for agent, n in h.placement.items():
            if agent not in instances:
                most = max(n, held[agent][2]) if agent in held else n
                held[agent] = (h.pool, price, most)
    if not held:
        return {}
    registered = {
        r.id: int(r.slots)
        for r in db.fetch_rows(conn, _AgentSlots, _AGENT_SLOTS, {"ids": sorted(held)})
    }
    out = {}
    for agent, (pool, price, most) in sorted(held.items()):
        slots = registered.get(agent) or most
        out[agent] = Machine(
            id=agent,
            pool=pool,
            instance_type="",
            market=Market.ON_DEMAND,
            launched_at=_EPOCH,
            ended_at=None,
            slots=slots,
            hourly_usd=price.hourly(slots),
            static=True,
        )
    return out


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def first_placement(conn: Conn) -> dt.datetime | None:
    """When the first allocation ever placed was placed (None: none was)."""
    return db.scalar(conn, dt.datetime, "SELECT min(placed_at) AS t FROM allocations")


def experiment_exists(conn: Conn, experiment_id: int) -> bool:
    return db.exists(
        conn, "SELECT 1 AS x FROM experiments WHERE id = %s AND NOT deleted", (experiment_id,)
    )
