"""The usage and cost figures reconcile, on a real PostgreSQL: what the experiments were charged
in a window adds up to their pool's total for it; the pool's total plus what no task held is
what its instances cost; windows that cut through allocations are clipped, so windows that tile
a range add up to the range. The numbers are worked out by hand from the rows written here."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from det.master import usage
from det.master.config import parse_config
from det.master.db import upgrade
from det.master.schemas import usage as wire
from det.master.services import usage as svc

pytestmark = pytest.mark.integration

Conn = psycopg.Connection[dict[str, Any]]
T0 = dt.datetime(2025, 3, 1, 10, 0, tzinfo=dt.UTC)
NOW = dt.datetime(2025, 3, 3, 0, 0, tzinfo=dt.UTC)
POOL = "gpu"


def h(hours: float) -> dt.datetime:
    return T0 + dt.timedelta(hours=hours)


CONFIG = parse_config(
    {
        "resource_pools": [
            {
                "pool_name": POOL,
                "provider": {
                    "type": "aws",
                    "region": "us-east-1",
                    "image_id": "ami-1",
                    "instance_type": "g.4x",
                    "instance_slots": 4,
                    "cost": {"prices": {"g.4x": 4.0}, "spot_prices": {"g.4x": 1.0}},
                },
            },
            {"pool_name": "static"},
        ]
    },
    env={},
)


@pytest.fixture
def conn(pg_url: str) -> Iterator[Conn]:
    upgrade(pg_url)
    with psycopg.connect(pg_url, row_factory=dict_row, autocommit=True) as c:
        for name in ("alice", "bob"):
            c.execute("INSERT INTO users (username, password_hash) VALUES (%s, 'x')", (name,))
        yield c


def user(conn: Conn, name: str) -> int:
    return int(conn.execute("SELECT id FROM users WHERE username = %s", (name,)).fetchone()["id"])  # type: ignore[index]


def experiment(conn: Conn, owner: str, labels: list[str]) -> int:
    eid = int(
        conn.execute(
            "INSERT INTO experiments (name, config, original_config, state, owner_id, labels)"
            " VALUES ('e', '{}', '', 'ACTIVE', %s, %s) RETURNING id",
            (user(conn, owner), Jsonb(labels)),
        ).fetchone()["id"]  # type: ignore[index]
    )
    conn.execute(
        "INSERT INTO jobs (id, experiment_id, owner_id, resource_pool, priority, queue_key)"
        " VALUES (%s, %s, %s, %s, 42, 0)",
        (f"job-{eid}", eid, user(conn, owner), POOL),
    )
    return eid


def trial(conn: Conn, eid: int, n: int) -> int:
    return int(
        conn.execute(
            "INSERT INTO trials (experiment_id, request_id, task_id, hparams, seed, state)"
            " VALUES (%s, %s, %s, '{}', 1, 'ACTIVE') RETURNING id",
            (eid, f"r{n}", f"{eid}.{n}"),
        ).fetchone()["id"]  # type: ignore[index]
    )


def allocation(
    conn: Conn,
    aid: str,
    eid: int,
    tid: int | None,
    placement: dict[str, list[str]],
    start: dt.datetime,
    end: dt.datetime | None,
    pool: str = POOL,
) -> None:
    slots = sum(len(v) for v in placement.values())
    conn.execute(
        "INSERT INTO allocations (id, kind, task_id, trial_id, job_id, resource_pool,"
        " slots_needed, state, placement, token_hash, placed_at, ended_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 'x', %s, %s)",
        (
            aid,
            "TRIAL" if tid is not None else "CHECKPOINT_GC",
            f"{eid}.{tid}",
            tid,
            f"job-{eid}",
            pool,
            slots,
            "TERMINATED" if end else "RUNNING",
            Jsonb(placement),
            start,
            end,
        ),
    )


def machine(
    conn: Conn, iid: str, market: str, start: dt.datetime, end: dt.datetime | None, slots: int = 4
) -> None:
    conn.execute(
        "INSERT INTO instances (id, resource_pool, instance_type, market, state, launched_at,"
        " terminated_at) VALUES (%s, %s, 'g.4x', %s, %s, %s, %s)",
        (iid, POOL, market, "terminated" if end else "running", start, end),
    )
    conn.execute("INSERT INTO agents (id, resource_pool) VALUES (%s, %s)", (iid, POOL))
    for s in range(slots):
        conn.execute(
            "INSERT INTO slots (agent_id, slot_id, type) VALUES (%s, %s, 'cuda')", (iid, str(s))
        )


@pytest.fixture
def cluster(conn: Conn) -> dict[str, int]:
    """Two machines of 4 slots: ``od`` on-demand ($4/h: $1 per slot-hour) from h0 to h10,
    ``sp`` spot ($1/h) from h1 to h8; alice's experiment A (labels x, y) and bob's B (label x),
    and a static agent with no price."""
    machine(conn, "od", "on_demand", h(0), h(10))
    machine(conn, "sp", "spot", h(1), h(8))
    conn.execute("INSERT INTO agents (id, resource_pool) VALUES ('rack1', 'static')")
    a = experiment(conn, "alice", ["x", "y"])
    b = experiment(conn, "bob", ["x"])
    a1, a2, b1 = trial(conn, a, 1), trial(conn, a, 2), trial(conn, b, 1)
    # A's trial 1: 2 slots of od, h1 to h5 (8 slot-hours, $8).
    allocation(conn, f"{a}.1.1", a, a1, {"od": ["0", "1"]}, h(1), h(5))
    # A's trial 2: 4 slots of sp, h2 to h6 (16 slot-hours, $4), then 1 slot of od from h6 on,
    # still running at NOW (but od ended at h10: charged to h10 only).
    allocation(conn, f"{a}.2.1", a, a2, {"sp": ["0", "1", "2", "3"]}, h(2), h(6))
    allocation(conn, f"{a}.2.2", a, a2, {"od": ["3"]}, h(6), None)
    # B's trial: 2 slots of od and 2 of sp (distributed), h3 to h4.
    allocation(conn, f"{b}.1.1", b, b1, {"od": ["2", "3"], "sp": ["0", "1"]}, h(3), h(4))
    # B's checkpoint GC: no slots, on od.
    allocation(conn, f"{b}.gc.1", b, None, {"od": []}, h(4), h(4.5))
    # An allocation on the static pool: slot-seconds, no dollars.
    allocation(conn, f"{b}.1.2", b, b1, {"rack1": ["0"]}, h(5), h(7), pool="static")
    return {"A": a, "B": b, "a1": a1, "a2": a2, "b1": b1}


def report(conn: Conn, periods: list[tuple[str, dt.datetime, dt.datetime]]) -> list[usage.Period]:
    start, end = periods[0][1], periods[-1][2]
    holds = svc.holds(conn, start, end)
    machines = svc.machines(conn, CONFIG, start, end)
    return usage.aggregate(holds, machines, periods, NOW)


def test_the_experiments_add_up_to_the_pool_and_the_pool_and_idle_to_its_machines(
    conn: Conn, cluster: dict[str, int]
) -> None:
    (p,) = report(conn, [("all", h(0), NOW)])
    a, b = str(cluster["A"]), str(cluster["B"])
    exps = p.by["experiment"]
    # By hand: A = $8 (trial 1) + $4 (sp) + $4 (od slot h6..h10, od's end) = $16;
    # B = od 2 slots 1 h ($2) + sp 2 slots 1 h ($0.5) = $2.5.
    assert exps[a].usd == pytest.approx(16.0)
    assert exps[a].spot_usd == pytest.approx(4.0)
    assert exps[a].on_demand_usd == pytest.approx(12.0)
    assert exps[b].usd == pytest.approx(2.5)
    assert exps[b].spot_usd == pytest.approx(0.5)
    pool = p.by["resource_pool"][POOL]
    assert sum(f.usd for f in exps.values()) == pytest.approx(pool.usd) == pytest.approx(18.5)
    assert p.total.usd == pytest.approx(pool.usd)
    # The machines: od 10 h x $4 = $40, sp 7 h x $1 = $7; what no task held is the rest.
    assert p.machines_usd[POOL] == pytest.approx(47.0)
    assert p.idle_usd[POOL] == pytest.approx(47.0 - 18.5)
    # Slot-seconds count everywhere (the static pool's too), dollars only where priced.
    static = p.by["resource_pool"]["static"]
    assert static.slot_seconds == pytest.approx(2 * 3600) and not static.priced
    assert exps[b].slot_seconds == pytest.approx((4 * 1 + 1 * 2) * 3600)
    # Labels count each experiment once per label; users and workspaces partition.
    assert p.by["experiment_label"]["x"].usd == pytest.approx(18.5)
    assert p.by["experiment_label"]["y"].usd == pytest.approx(16.0)
    assert p.by["username"]["alice"].usd == pytest.approx(16.0)
    assert p.by["username"]["bob"].usd == pytest.approx(2.5)
    assert sum(f.usd for f in p.by["workspace"].values()) == pytest.approx(18.5)


def test_windows_cutting_through_allocations_are_clipped_and_tile_the_range(
    conn: Conn, cluster: dict[str, int]
) -> None:
    # A window h2.5..h3.5 by hand: A1 od 2 slots 1 h ($2), A2 sp 4 slots 1 h ($1),
    # B od 2 slots 0.5 h ($1) + sp 2 slots 0.5 h ($0.25).
    (w,) = report(conn, [("w", h(2.5), h(3.5))])
    assert w.by["experiment"][str(cluster["A"])].usd == pytest.approx(3.0)
    assert w.by["experiment"][str(cluster["B"])].usd == pytest.approx(1.25)
    assert w.by["resource_pool"][POOL].usd == pytest.approx(4.25)
    assert w.machines_usd[POOL] == pytest.approx(4.0 + 1.0)
    # Hour-long windows from h0 to NOW add up to the whole range, figure by figure.
    hours = int((NOW - h(0)).total_seconds() // 3600)
    tiles = report(conn, [(str(i), h(i), h(i + 1)) for i in range(hours)])
    (whole,) = report(conn, [("all", h(0), h(hours))])
    for dim in usage.DIMENSIONS:
        for key, f in whole.by[dim].items():
            assert sum(t.by[dim][key].usd for t in tiles) == pytest.approx(f.usd), (dim, key)
            assert sum(t.by[dim][key].slot_seconds for t in tiles) == pytest.approx(
                f.slot_seconds
            ), (dim, key)
    assert sum(t.machines_usd[POOL] for t in tiles) == pytest.approx(whole.machines_usd[POOL])
    assert sum(t.idle_usd.get(POOL, 0.0) for t in tiles) == pytest.approx(whole.idle_usd[POOL])
    # Every tile reconciles on its own too.
    for t in tiles:
        assert sum(f.usd for f in t.by["experiment"].values()) == pytest.approx(
            t.by["resource_pool"][POOL].usd if POOL in t.by["resource_pool"] else 0.0
        )


def test_days_split_at_midnight_utc(conn: Conn, cluster: dict[str, int]) -> None:
    # od runs h0..h10 = 10:00 to 20:00 on 1 March; A2's second run holds od until 20:00.
    periods = usage.days(dt.date(2025, 3, 1), dt.date(2025, 3, 2))
    first, second = report(conn, periods)
    assert first.label == "2025-03-01" and second.label == "2025-03-02"
    assert second.total.usd == 0.0 and second.machines_usd == {}
    # A2's second run is live, so its slot-seconds go on to NOW (no dollars: od ended).
    a = str(cluster["A"])
    assert second.by["experiment"][a].slot_seconds == pytest.approx(24 * 3600)
    (month,) = report(conn, usage.months(dt.date(2025, 3, 1), dt.date(2025, 3, 1)))
    assert month.label == "2025-03"
    assert month.total.usd == pytest.approx(first.total.usd)


# An on-prem pool with a price (det's ``resource_pools[].price``): $1 per slot-hour plus $2 per
# agent-hour, so a slot of the 4-slot agent costs $1.5 an hour and one of the 2-slot agent $2.
RACK = "rack"
PRICED = parse_config(
    {
        "resource_pools": [
            {"pool_name": RACK, "price": {"slot_hour": 1.0, "agent_hour": 2.0}},
            {"pool_name": "static"},
        ]
    },
    env={},
)


def rack_agent(conn: Conn, aid: str, slots: int, pool: str = RACK) -> None:
    conn.execute("INSERT INTO agents (id, resource_pool) VALUES (%s, %s)", (aid, pool))
    for s in range(slots):
        conn.execute(
            "INSERT INTO slots (agent_id, slot_id, type) VALUES (%s, %s, 'cuda')", (aid, str(s))
        )


def in_workspace(conn: Conn, eid: int, name: str) -> None:
    wid = conn.execute(
        "INSERT INTO workspaces (name) VALUES (%s) RETURNING id", (name,)
    ).fetchone()["id"]  # type: ignore[index]
    pid = conn.execute(
        "INSERT INTO projects (workspace_id, name, key) VALUES (%s, %s, %s) RETURNING id",
        (wid, name, name.upper()),
    ).fetchone()["id"]  # type: ignore[index]
    conn.execute("UPDATE experiments SET project_id = %s WHERE id = %s", (pid, eid))


def test_a_priced_on_prem_pool_charges_users_workspaces_and_experiments_its_total(
    conn: Conn,
) -> None:
    rack_agent(conn, "r1", 4)
    rack_agent(conn, "r2", 2)
    rack_agent(conn, "old9", 1, pool="static")
    a = experiment(conn, "alice", ["x"])
    b = experiment(conn, "bob", ["x"])
    in_workspace(conn, a, "vision")
    in_workspace(conn, b, "nlp")
    a1, b1 = trial(conn, a, 1), trial(conn, b, 1)
    # alice: 2 slots of r1, h0 to h2: 4 slot-hours at $1.5 = $6.
    allocation(conn, f"{a}.1.1", a, a1, {"r1": ["0", "1"]}, h(0), h(2), pool=RACK)
    # bob: 2 slots of r1 and both of r2, h1 to h4: 6 x $1.5 + 6 x $2 = $21.
    allocation(conn, f"{b}.1.1", b, b1, {"r1": ["2", "3"], "r2": ["0", "1"]}, h(1), h(4), RACK)
    # bob's checkpoint GC on r1 holds no slot: $0. alice on the unpriced pool: no dollars.
    allocation(conn, f"{b}.gc.1", b, None, {"r1": []}, h(4), h(5), pool=RACK)
    allocation(conn, f"{a}.1.2", a, a1, {"old9": ["0"]}, h(5), h(6), pool="static")

    start, end = h(0), NOW
    holds = svc.holds(conn, start, end)
    machines = svc.machines(conn, PRICED, start, end, holds)
    (p,) = usage.aggregate(holds, machines, [("all", start, end)], NOW)
    assert p.total.usd == pytest.approx(27.0) and p.total.on_demand_usd == pytest.approx(27.0)
    for dim, want in (
        ("username", {"alice": 6.0, "bob": 21.0}),
        ("workspace", {"vision": 6.0, "nlp": 21.0}),
        ("experiment", {str(a): 6.0, str(b): 21.0}),
        ("resource_pool", {RACK: 27.0}),
    ):
        priced = {k: f.usd for k, f in p.by[dim].items() if f.priced}
        assert priced == pytest.approx(want), dim
        assert sum(priced.values()) == pytest.approx(p.total.usd), dim
    assert not p.by["resource_pool"]["static"].priced
    # A static agent's life is not recorded: no idle part is made up for it.
    assert p.machines_usd == {} and p.idle_usd == {}

    # On the wire: the dollars by key, and null (never 0) where nothing had a price.
    entry = wire.aggregated_entry(p, monthly=False)
    cost = entry["cost"]
    assert cost["usd"] == pytest.approx(27.0) and cost["idleUsd"] is None
    assert {k: d["usd"] for k, d in cost["byWorkspace"].items()} == pytest.approx(
        {"vision": 6.0, "nlp": 21.0}
    )
    assert "static" not in cost["byResourcePool"]
    unpriced_holds = svc.holds(conn, h(5), h(6))
    (q,) = usage.aggregate(
        unpriced_holds,
        svc.machines(conn, PRICED, h(5), h(6), unpriced_holds),
        [("w", h(5), h(6))],
        NOW,
    )
    none = wire.aggregated_entry(q, monthly=False)["cost"]
    assert q.total.slot_seconds == pytest.approx(3600)
    assert (none["usd"], none["spotUsd"], none["onDemandUsd"], none["idleUsd"]) == (None,) * 4
