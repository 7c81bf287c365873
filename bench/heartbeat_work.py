"""What one agent heartbeat costs the master and PostgreSQL, counted (not timed): SQL
statements the master sends, rows PostgreSQL reads for them (sequential and by index, per
table), and the plan of each query that looks allocations up by agent (``placement ? agent``),
on a database filled to N agents x M running trials by the master's own code.

The fill (``--agents 1000 --trials 2000``, a minute or two): a master app in this process
(``tests.integration.inproc``) on a fresh ``pgserver`` database; ``ceil(M / 50)`` experiments
of up to 50 trials (``bench/scale.py``'s config) created through the API; N agents registered
by a heartbeat each, ``ceil(M / N)`` cpu slots apiece; the control loop's passes run in this
process until the searcher has made every trial and the scheduler placed each; then every
agent's heartbeat reports its containers RUNNING (the allocations move to RUNNING). ``--ended
K`` adds K ended allocations (copies of the live ones, TERMINATED) for a cluster with history.

The measure: ``--sample`` agents (spread over the fleet) each send the heartbeat a running
agent sends every second (its slots, its containers RUNNING), straight into
``services.agents.heartbeat`` on a pooled connection. Per heartbeat: statements (every
``execute``/``executemany`` of psycopg in this process), rows read (PostgreSQL's
``pg_stat_xact_user_tables`` of the heartbeat's transaction, read before it commits:
``seq_tup_read`` + ``idx_tup_fetch``), sequential scans, and the containers' specs in the
answer. These counts do not depend on the machine's load. Then ``EXPLAIN (ANALYZE, BUFFERS)``
of the placement queries for one agent: the plan's shape and its rows and buffers.

    .venv/bin/python bench/heartbeat_work.py [--agents 1000] [--trials 2000] [--sample 20]
        [--ended 0] [--no-placement-index]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import math
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# The queries that find an agent's allocations by its key in ``allocations.placement`` (each
# service's own text, with this agent's id): the heartbeat's, a spot notice's, losing an agent,
# disabling one, the provisioner's idle check.
PLACEMENT_QUERIES = {
    # With the ids of the containers the agent reports (its own live allocations here).
    "heartbeat: live_on_or_among": "SELECT id FROM allocations WHERE (placement ? %(agent)s"
    " AND state <> 'TERMINATED') OR id = ANY(%(ids)s) ORDER BY id",
    "heartbeat after a write: live_on": "SELECT id FROM allocations WHERE placement ? %(agent)s"
    " AND state <> 'TERMINATED' ORDER BY id",
    "agent lost / disabled / spot notice": "SELECT id FROM allocations WHERE placement ? %(agent)s"
    " AND state <> 'TERMINATED'",
    "provisioner: idle agent": "SELECT 1 FROM allocations x WHERE x.placement ? %(agent)s"
    " AND x.state <> 'TERMINATED' LIMIT 1",
}


class StatementCounter:
    """Counts psycopg statements sent from this process while :meth:`counting` (one thread)."""

    def __init__(self) -> None:
        self.count = 0
        self.texts: collections.Counter[str] = collections.Counter()
        self._on = False
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def installed(self) -> Iterator[StatementCounter]:
        execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany
        counter = self

        def counted_execute(cur: Any, query: Any, *a: Any, **kw: Any) -> Any:
            counter._seen(query)
            return execute(cur, query, *a, **kw)

        def counted_executemany(cur: Any, query: Any, params: Any, **kw: Any) -> Any:
            params = list(params)
            for _ in params:
                counter._seen(query)
            return executemany(cur, query, params, **kw)

        psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign,assignment]
        psycopg.Cursor.executemany = counted_executemany  # type: ignore[method-assign,assignment]
        try:
            yield self
        finally:
            psycopg.Cursor.execute = execute  # type: ignore[method-assign,assignment]
            psycopg.Cursor.executemany = executemany  # type: ignore[method-assign,assignment]

    def _seen(self, query: Any) -> None:
        if self._on:
            with self._lock:
                self.count += 1
                text = query.as_string(None) if hasattr(query, "as_string") else str(query)
                self.texts[" ".join(text.split())[:90]] += 1

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        self.count, self.texts = 0, collections.Counter()
        self._on = True
        try:
            yield
        finally:
            self._on = False


_READS = (
    "SELECT relname, seq_scan, seq_tup_read, coalesce(idx_scan, 0), coalesce(idx_tup_fetch, 0)"
    " FROM pg_stat_xact_user_tables"
)


def table_reads(conn: Any) -> dict[str, tuple[int, int, int, int]]:
    """This transaction's reads so far, per table: (seq scans, rows read by them, index scans,
    rows fetched by them)."""
    return {
        str(r[0]): (int(r[1]), int(r[2]), int(r[3]), int(r[4]))
        for r in conn.cursor(row_factory=psycopg.rows.tuple_row).execute(_READS).fetchall()
    }


def running_report(agent_id: str, slots: int, allocations: list[str]) -> dict[str, Any]:
    """The heartbeat a running agent sends each second (bench/scale.py's sim agent's)."""
    return {
        "resourcePool": "default",
        "version": "sim",
        "slots": [{"id": str(s), "type": "cpu", "brand": "sim"} for s in range(slots)],
        "containers": [
            {"allocationId": a, "containerId": f"sim-{a}", "state": "RUNNING", "exitCode": None}
            for a in allocations
        ],
        "preemptionNotice": None,
    }


def placed(conn: Any) -> dict[str, list[str]]:
    """Agent id -> the live allocations placed on it."""
    out: dict[str, list[str]] = collections.defaultdict(list)
    rows = conn.execute(
        "SELECT k, a.id FROM allocations a, jsonb_object_keys(a.placement) k"
        " WHERE a.state <> 'TERMINATED' AND a.placement IS NOT NULL ORDER BY a.id"
    ).fetchall()
    for r in rows:
        out[str(r["k"])].append(str(r["id"]))
    return out


def fill(m: Any, agents: int, trials: int, ended: int, log: Any = print) -> dict[str, list[str]]:
    """Fills the master's database to ``agents`` x ``trials`` running (see the module's
    docstring); returns each agent's allocations."""
    from bench.scale import create_experiments
    from det.master.loop import ControlLoop
    from det.master.services import agents as svc

    st = m.state
    slots = max(1, math.ceil(trials / agents))
    t0 = time.monotonic()
    create_experiments(m, trials)
    log(f"  experiments created ({time.monotonic() - t0:.0f} s)")
    with st.pool.connection() as conn:
        for i in range(agents):
            svc.heartbeat(conn, st, agent_name(i), running_report(agent_name(i), slots, []))
            conn.commit()
    log(f"  {agents} agents registered ({time.monotonic() - t0:.0f} s)")
    loop = ControlLoop(st, threading.Event())
    deadline = time.monotonic() + 1800
    while True:
        loop.run_once()
        with st.pool.connection() as conn:
            n = conn.execute(
                "SELECT count(*) AS n FROM allocations WHERE state = 'ASSIGNED'"
            ).fetchone()["n"]
        if n >= trials:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {n} of {trials} trials placed in 30 minutes")
    log(f"  {trials} trials placed ({time.monotonic() - t0:.0f} s)")
    with st.pool.connection() as conn:
        by_agent = placed(conn)
        for i in range(agents):
            a = agent_name(i)
            svc.heartbeat(conn, st, a, running_report(a, slots, by_agent.get(a, [])))
            conn.commit()
        if ended:
            conn.execute(
                "WITH live AS (SELECT *, row_number() OVER (ORDER BY id) - 1 AS r,"
                " count(*) OVER () AS n FROM allocations WHERE state <> 'TERMINATED')"
                " INSERT INTO allocations (id, kind, task_id, trial_id, job_id, resource_pool,"
                " slots_needed, state, token_hash, placement, placed_at, ended_at)"
                " SELECT live.id || '.ended.' || g, live.kind, live.task_id, live.trial_id,"
                " live.job_id, live.resource_pool, live.slots_needed, 'TERMINATED',"
                " live.token_hash, live.placement, live.placed_at, now()"
                " FROM generate_series(0, %s - 1) g JOIN live ON live.r = g %% live.n",
                (ended,),
            )
            conn.commit()
        conn.execute("ANALYZE")
        conn.commit()
    log(f"  containers running ({time.monotonic() - t0:.0f} s)")
    return by_agent


def agent_name(i: int) -> str:
    return f"scale-{i:05d}"


def measure(
    m: Any, counter: StatementCounter, by_agent: dict[str, list[str]], slots: int, sample: int
) -> list[dict[str, Any]]:
    """One running heartbeat of each of ``sample`` agents, counted (see the docstring)."""
    from det.master.services import agents as svc

    st = m.state
    names = sorted(by_agent)
    step = max(1, len(names) // max(1, sample))
    out = []
    for name in names[::step][:sample]:
        report = running_report(name, slots, by_agent[name])
        with st.pool.connection() as conn:
            svc.heartbeat(conn, st, name, report)  # warm: caches as a running master has them
        with st.pool.connection() as conn:
            # The view holds what this backend has not yet reported (earlier transactions' too):
            # the heartbeat's reads are the difference within its transaction.
            before = table_reads(conn)
            with counter.counting():
                answer = svc.heartbeat(conn, st, name, report)
            after = table_reads(conn)
        zero = (0, 0, 0, 0)
        reads = {
            t: tuple(x - y for x, y in zip(v, before.get(t, zero), strict=True))
            for t, v in after.items()
        }
        out.append(
            {
                "agent": name,
                "containers": len(by_agent[name]),
                "statements": counter.count,
                "texts": dict(counter.texts),
                "rows_read": sum(r[1] + r[3] for r in reads.values()),
                "seq_scans": {t: r[0] for t, r in reads.items() if r[0]},
                "rows_by_table": {t: r[1] + r[3] for t, r in reads.items() if r[1] + r[3]},
                "specs": sum(1 for c in answer["containers"] if "spec" in c),
            }
        )
    return out


def explain(url: str, agent: str) -> dict[str, list[str]]:
    with psycopg.connect(url, autocommit=True) as c:
        ids = [
            str(r[0])
            for r in c.execute(
                "SELECT id FROM allocations WHERE placement ? %s AND state <> 'TERMINATED'",
                (agent,),
            ).fetchall()
        ]
        return {
            name: [
                str(r[0])
                for r in c.execute(
                    "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, SUMMARY OFF) " + q,
                    {"agent": agent, "ids": ids},
                ).fetchall()
            ]
            for name, q in PLACEMENT_QUERIES.items()
        }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=1000)
    p.add_argument("--trials", type=int, default=2000)
    p.add_argument("--sample", type=int, default=20)
    p.add_argument("--ended", type=int, default=0, help="ended allocations to add (history)")
    p.add_argument(
        "--no-placement-index",
        action="store_true",
        help="drop migration 0046's index after the fill: the reads and plans before it",
    )
    args = p.parse_args()
    if args.agents < 1 or args.trials < 1:
        sys.exit("--agents and --trials: at least 1")

    from bench._pg import bench_database
    from tests.integration.inproc import in_process_master

    counter = StatementCounter()
    with tempfile.TemporaryDirectory() as tmp, counter.installed():
        server, db_url = bench_database(Path(tmp))
        try:
            with in_process_master(Path(tmp), db_url, {"agent_timeout_seconds": 3600}) as m:
                print(f"filling {args.agents} agents x {args.trials} trials ...")
                by_agent = fill(m, args.agents, args.trials, args.ended)
                if args.no_placement_index:
                    with psycopg.connect(db_url, autocommit=True) as c:
                        c.execute("DROP INDEX allocations_live_placement")
                slots = max(1, math.ceil(args.trials / args.agents))
                rows = measure(m, counter, by_agent, slots, args.sample)
                busiest = max(by_agent, key=lambda a: len(by_agent[a]))
                plans = explain(db_url, busiest)
            with psycopg.connect(db_url, autocommit=True) as c:
                sizes = c.execute(
                    "SELECT (SELECT count(*) FROM allocations),"
                    " (SELECT count(*) FROM allocations WHERE state <> 'TERMINATED'),"
                    " (SELECT count(*) FROM events)"
                ).fetchone()
        finally:
            server.cleanup()
    assert sizes is not None
    print(
        f"\n{args.agents} agents x {args.trials} trials: allocations {sizes[0]}"
        f" ({sizes[1]} live), events {sizes[2]}; {len(rows)} heartbeats measured"
    )
    print("agent        containers  statements  rows read  specs  seq scans")
    for r in rows:
        print(
            f"{r['agent']:<12} {r['containers']:>10} {r['statements']:>11} {r['rows_read']:>10}"
            f" {r['specs']:>6}  {r['seq_scans'] or '-'}"
        )
    n = len(rows)
    print(
        f"mean: statements {sum(r['statements'] for r in rows) / n:.1f},"
        f" rows read {sum(r['rows_read'] for r in rows) / n:.1f}"
        f" per heartbeat"
    )
    print("\nrows read by table (all measured heartbeats):")
    by_table: collections.Counter[str] = collections.Counter()
    for r in rows:
        by_table.update(r["rows_by_table"])
    for t, k in by_table.most_common():
        print(f"  {t:<24} {k / n:>10.1f} per heartbeat")
    print("\nstatements of the first measured heartbeat:")
    for text, k in sorted(rows[0]["texts"].items(), key=lambda kv: -kv[1]):
        print(f"  {k:>3} x {text}")
    for name, lines in plans.items():
        print(f"\nEXPLAIN (ANALYZE, BUFFERS) {name} (agent {busiest}):")
        for line in lines:
            print("  " + line)


if __name__ == "__main__":
    main()
