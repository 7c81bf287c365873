"""What the control plane's hot paths cost as a cluster grows, counted in rows read
(deterministic, unlike timings): a heartbeat finds the agent's allocations by the placement
index, not by reading every live allocation; a scheduling pass that places K allocations
reads the live allocations once, not K times (bench/heartbeat_work.py prints these counts
on a cluster of 1,000 agents x 2,000 trials)."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from det.master import states
from det.master.services import allocation_rows, containers

pytestmark = pytest.mark.integration


def _table_reads(conn: Any) -> int:
    """Rows of ``allocations`` this backend read that it has not reported yet (the view's
    values within one transaction grow only by what the transaction reads)."""
    row = conn.execute(
        "SELECT seq_tup_read + coalesce(idx_tup_fetch, 0) AS n FROM pg_stat_xact_user_tables"
        " WHERE relname = 'allocations'"
    ).fetchone()
    return int(row["n"]) if row else 0


def test_an_agents_allocations_are_found_by_the_placement_index_on_a_full_cluster(
    migrated_db: str,
) -> None:
    agents_n, live, ended = 1000, 2000, 20000
    with psycopg.connect(migrated_db, autocommit=True, row_factory=dict_row) as conn:
        # The way a cluster gets there: queued, placed by the scheduler's apply step in passes
        # (each row updated once), then running; and the history of ended ones.
        conn.execute(
            "INSERT INTO allocations (id, kind, task_id, job_id, resource_pool, slots_needed,"
            " state, token_hash) SELECT 'a.' || i, 'TRIAL', 't.' || i, 'j', 'default', 1,"
            " 'PENDING', 'h' FROM generate_series(0, %s - 1) i",
            (live,),
        )
        for start in range(0, live, 100):
            with conn.transaction():
                states.allocations_placed(
                    conn,
                    {f"a.{i}": {f"agent-{i % agents_n}": ["0"]} for i in range(start, start + 100)},
                )
        conn.execute("UPDATE allocations SET state = 'RUNNING'")
        conn.execute(
            "INSERT INTO allocations (id, kind, task_id, job_id, resource_pool, slots_needed,"
            " state, token_hash, placement)"
            " SELECT 'e.' || i, 'TRIAL', 't.' || i, 'j', 'default', 1, 'TERMINATED', 'h',"
            " jsonb_build_object('agent-' || (i %% %s), jsonb_build_array('0'))"
            " FROM generate_series(0, %s - 1) i",
            (agents_n, ended),
        )
        conn.execute("ANALYZE allocations")
        plan = "\n".join(
            str(r["QUERY PLAN"])
            for r in conn.execute(
                "EXPLAIN SELECT id FROM allocations WHERE placement ? 'agent-7'"
                " AND state <> 'TERMINATED'"
            ).fetchall()
        )
        assert "allocations_live_placement" in plan, plan

        with conn.transaction():
            before = _table_reads(conn)
            found = allocation_rows.live_on(conn, "agent-7")
            read = _table_reads(conn) - before
        assert [a.id for a in found] == ["a.1007", "a.7"]
        assert json.dumps(found[0].placement) == '{"agent-7": ["0"]}'
        # Its two rows (a bitmap's page may hold a few more), not the 2,000 live ones.
        assert read <= 10, read


def test_a_pass_that_places_many_allocations_reads_the_live_ones_once(migrated_db: str) -> None:
    live, placing, agents_n = 400, 50, 100
    with psycopg.connect(migrated_db, autocommit=True, row_factory=dict_row) as conn:
        conn.execute(
            "INSERT INTO agents (id, resource_pool, addresses)"
            " SELECT 'agent-' || i, 'default', jsonb_build_array('10.0.' || i || '.1')"
            " FROM generate_series(0, %s - 1) i",
            (agents_n,),
        )
        conn.execute(
            "INSERT INTO allocations (id, kind, task_id, job_id, resource_pool, slots_needed,"
            " state, token_hash, placement, port_offset)"
            " SELECT 'live.' || i, 'TRIAL', 't.' || i, 'j', 'default', 1, 'RUNNING', 'h',"
            " jsonb_build_object('agent-' || (i %% %(agents)s), jsonb_build_array('0')), i %% 7"
            " FROM generate_series(0, %(live)s - 1) i",
            {"agents": agents_n, "live": live},
        )
        conn.execute(
            "INSERT INTO allocations (id, kind, task_id, job_id, resource_pool, slots_needed,"
            " state, token_hash)"
            " SELECT 'new.' || i, 'TRIAL', 'n.' || i, 'j', 'default', 1, 'PENDING', 'h'"
            " FROM generate_series(0, %s - 1) i",
            (placing,),
        )
        conn.execute("ANALYZE")
        # Two new ones per agent on the first 25 agents, each of which runs 4 live ones.
        placements = {f"new.{i}": {f"agent-{i // 2}": ["1"]} for i in range(placing)}
        with conn.transaction():
            moved = states.allocations_placed(conn, placements)
            before = _table_reads(conn)
            containers.choose_port_offsets(conn, {a: placements[a] for a in moved})
            read = _table_reads(conn) - before
        assert len(moved) == placing
        got = {
            r["id"]: r["port_offset"]
            for r in conn.execute(
                "SELECT id, port_offset FROM allocations WHERE state <> 'TERMINATED'"
            ).fetchall()
        }
        for i in range(0, placing, 2):  # unique on each agent, among its live and new ones
            agent = i // 2
            mine = [got[f"new.{i}"], got[f"new.{i + 1}"]]
            mine += [got[f"live.{j}"] for j in range(agent, live, agents_n)]
            assert len(set(mine)) == len(mine) == 6, (agent, mine)
        # The live ones once (and each placed row by its key), not once per placement:
        # 50 x 450 on the code that asked for each placement's neighbours in turn.
        assert read <= 2 * (live + placing), read
