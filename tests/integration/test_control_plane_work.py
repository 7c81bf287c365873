"""What the control plane's hot paths cost as a cluster grows, counted in statements and rows
read (deterministic, unlike timings): a running agent's heartbeat (every second, from every
agent) sends a fixed number of SQL statements whatever the number of its containers and finds
the agent's allocations by the placement index, not by reading every live allocation; a
scheduling pass that places K allocations reads the live allocations once, not K times
(bench/heartbeat_work.py prints these counts on a cluster of 1,000 agents x 2,000 trials)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from det.master import states
from det.master.loop import run_passes_until
from det.master.services import agents, allocation_rows, containers, scheduling, users
from tests.integration.pg_trace import round_trips, traced_pool

pytestmark = pytest.mark.integration

CONFIG = """
name: hb-{n}
entrypoint: python3 train.py
searcher: {{name: random, metric: loss, max_trials: {n}, max_concurrent_trials: {n},
  max_length: 100}}
hyperparameters: {{lr: {{type: double, minval: 0.001, maxval: 0.1}}}}
resources: {{slots_per_trial: 1}}
"""


class CountingCursor(psycopg.Cursor[Any]):
    """A cursor that counts what its connection sends (``conn.statements``)."""

    def execute(self, query: Any, *a: Any, **kw: Any) -> Any:
        self.connection.statements += 1  # type: ignore[attr-defined]
        return super().execute(query, *a, **kw)


def _counting(url: str) -> Any:
    conn = psycopg.connect(url, row_factory=dict_row, cursor_factory=CountingCursor)
    conn.statements = 0  # type: ignore[attr-defined]
    return conn


def _report(agent_id: str, slots: int, running: list[str], exited: tuple[str, ...] = ()) -> Any:
    return {
        "resourcePool": "default",
        "version": "t",
        "slots": [{"id": str(s), "type": "cpu", "brand": "t"} for s in range(slots)],
        "containers": [
            {"allocationId": a, "containerId": f"c-{a}", "state": "RUNNING", "exitCode": None}
            for a in running
        ]
        + [
            {"allocationId": a, "containerId": f"c-{a}", "state": "TERMINATED", "exitCode": 0}
            for a in exited
        ],
    }


def _beat(
    m: Any, conn: Any, agent_id: str, slots: int, running: list[str], exited: tuple[str, ...] = ()
) -> tuple[Any, int]:
    """One heartbeat in its own transaction: (the answer, the statements it sent)."""
    conn.statements = 0
    with conn.transaction():
        report = _report(agent_id, slots, running, exited)
        answer = agents.heartbeat(conn, m.state, agent_id, report)
    return answer, conn.statements


def _placed(conn: Any, agent_id: str) -> list[str]:
    return [a.id for a in allocation_rows.live_on(conn, agent_id)]


def test_a_running_agents_heartbeat_builds_no_spec_and_its_statements_do_not_grow_with_containers(
    api_master: Any, pg_url: str
) -> None:
    r = api_master.session().post(
        f"{api_master.url}/api/v1/experiments",
        json={"config": CONFIG.format(n=4), "activate": True},
    )
    assert r.status_code == 200, r.text
    with _counting(pg_url) as conn:
        conn.autocommit = True
        _beat(api_master, conn, "hb-one", 1, [])
        _beat(api_master, conn, "hb-three", 3, [])

        def all_placed() -> bool:
            return len(_placed(conn, "hb-one")) + len(_placed(conn, "hb-three")) == 4

        run_passes_until(api_master.state, all_placed, 60)
        one, three = _placed(conn, "hb-one"), _placed(conn, "hb-three")
        assert (len(one), len(three)) == (1, 3)

        # An agent that runs none of its allocations yet gets each one's spec to start it.
        answer, _ = _beat(api_master, conn, "hb-three", 3, [])
        assert {c["allocationId"] for c in answer["containers"] if c.get("spec")} == set(three)
        # Reported running: no spec for what runs, the spec for what does not run yet.
        answer, _ = _beat(api_master, conn, "hb-three", 3, three[:1])
        assert [c["action"] for c in answer["containers"]] == ["RUN"] * 3
        assert {c["allocationId"] for c in answer["containers"] if c.get("spec")} == set(three[1:])
        _beat(api_master, conn, "hb-one", 1, one)  # RUNNING now
        _beat(api_master, conn, "hb-three", 3, three)

        # The heartbeat every running agent sends each second.
        answer, with_three = _beat(api_master, conn, "hb-three", 3, three)
        assert [(c["allocationId"], c["action"]) for c in answer["containers"]] == [
            (a, "RUN") for a in three
        ]
        assert not [c for c in answer["containers"] if "spec" in c]
        _, with_one = _beat(api_master, conn, "hb-one", 1, one)
        assert with_three == with_one, (with_one, with_three)
        # The agent's row, its slots, its reported and live allocations in one read.
        assert with_three <= 3, with_three
        # Outside a transaction (the API's way): the same answer from one statement, the
        # agent's update with its allocations read beside it.
        conn.statements = 0
        quiet = agents.heartbeat(conn, api_master.state, "hb-three", _report("hb-three", 3, three))
        assert conn.statements == 1
        assert quiet["containers"] == answer["containers"]
        states = conn.execute(
            "SELECT DISTINCT state FROM allocations WHERE id = ANY(%s)", (one + three,)
        ).fetchall()
        assert [s["state"] for s in states] == ["RUNNING"]

        # A container reported ended is applied, and the answer follows that write: the ended
        # allocation is not in it (neither RUN, which would start it again, nor KILL).
        answer, _ = _beat(api_master, conn, "hb-three", 3, three[1:], exited=tuple(three[:1]))
        assert [(c["allocationId"], c["action"]) for c in answer["containers"]] == [
            (a, "RUN") for a in three[1:]
        ]


def test_a_quiet_heartbeat_is_its_one_statement_alone(
    api_master: Any, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API answers a heartbeat outside a transaction: one that changes nothing but the
    agent's liveness costs one statement's round trip (the agent's update, which compares its
    stored slots with the report's, and the read of its allocations beside it), no BEGIN and no
    COMMIT (on a loaded master each round trip is a wait for the interpreter lock while the
    connection is held); one that changes more is applied whole in a transaction, as before. Round trips are
    counted on the pooled connections by libpq's trace (one ``ReadyForQuery`` ends each)."""
    beat = api_master.new_session()
    beat.headers["Authorization"] = f"Bearer {api_master.agent_token}"
    beats: list[Path] = []

    def heartbeat(report: Any) -> tuple[Any, int]:
        beats.append(tmp_path / f"trace-{len(beats)}")
        with traced_pool(api_master.state.pool, beats[-1], monkeypatch):
            r = beat.post(f"{api_master.url}/api/v1/agents/quiet/heartbeat", json=report)
        assert r.status_code == 200, r.text
        return r.json(), round_trips(beats[-1])

    heartbeat(_report("quiet", 2, []))  # registers
    answer, trips = heartbeat(_report("quiet", 2, []))
    assert trips == 1, trips  # the update, the slots' comparison, the allocations: no BEGIN
    assert answer["containers"] == [] and answer["enabled"] and not answer["draining"]

    more, trips = heartbeat(_report("quiet", 3, []))  # a new slot: the transaction's path
    assert trips > 3 and more["containers"] == []
    with psycopg.connect(pg_url, autocommit=True, row_factory=dict_row) as conn:
        slots = conn.execute("SELECT count(*) AS n FROM slots WHERE agent_id = 'quiet'").fetchone()
        assert slots["n"] == 3
        registered = conn.execute(
            "SELECT count(*) AS n FROM events WHERE entity_id = 'quiet' AND kind = 'registered'"
        ).fetchone()
        assert registered["n"] == 1
        seen = conn.execute(
            "SELECT last_heartbeat > now() - interval '1 minute' AS fresh FROM agents"
            " WHERE id = 'quiet'"
        ).fetchone()
        assert seen["fresh"]
    # The same slot ids, one of them changed (a GPU's memory): compared whole, so written.
    changed = _report("quiet", 3, [])
    changed["slots"][1]["memoryMb"] = 16384
    again, trips = heartbeat(changed)
    assert trips > 3 and again["containers"] == []
    _, trips = heartbeat(changed)
    assert trips == 1
    with psycopg.connect(pg_url, autocommit=True, row_factory=dict_row) as conn:
        memory = conn.execute(
            "SELECT memory_mb FROM slots WHERE agent_id = 'quiet' AND slot_id = '1'"
        ).fetchone()
        assert memory["memory_mb"] == 16384


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

        # The heartbeat's read: the agent's live allocations and the ones its agent reports
        # (here one of them and one that ended), by the placement index and the primary key.
        with conn.transaction():
            before = _table_reads(conn)
            both = allocation_rows.live_on_or_among(conn, "agent-7", ["a.7", "e.7"])
            read = _table_reads(conn) - before
        assert [a.id for a in both] == ["a.1007", "a.7", "e.7"]
        assert [allocation_rows.is_live_on(a, "agent-7") for a in both] == [True, True, False]
        assert read <= 12, read


def test_a_tasks_token_is_found_by_its_index_whatever_the_clusters_history(
    migrated_db: str,
) -> None:
    """Each request a task makes names its allocation by its token (a report, a log batch, a
    long-poll): the lookup reads that allocation's row, not the table, which holds every
    allocation the cluster ever ran."""
    live, ended = 2000, 20000
    with psycopg.connect(migrated_db, autocommit=True, row_factory=dict_row) as conn:
        conn.execute(
            "INSERT INTO allocations (id, kind, task_id, job_id, resource_pool, slots_needed,"
            " state, token_hash) SELECT 'a.' || i, 'TRIAL', 't.' || i, 'j', 'default', 1,"
            " CASE WHEN i < %s THEN 'RUNNING' ELSE 'TERMINATED' END, md5('token ' || i)"
            " FROM generate_series(0, %s - 1) i",
            (live, live + ended),
        )
        conn.execute("ANALYZE allocations")
        for i in (7, live + 7):
            with conn.transaction():
                before = _table_reads(conn)
                found = users.allocation_for_digest(
                    conn, hashlib.md5(f"token {i}".encode()).hexdigest()
                )
                read = _table_reads(conn) - before
            assert found is not None and found.id == f"a.{i}"
            assert read <= 2, read
        with conn.transaction():
            before = _table_reads(conn)
            assert users.allocation_for_digest(conn, "no such digest") is None
            assert _table_reads(conn) - before == 0


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


def _all_reads(conn: Any) -> int:
    row = conn.execute(
        "SELECT sum(seq_tup_read + coalesce(idx_tup_fetch, 0)) AS n FROM pg_stat_xact_user_tables"
    ).fetchone()
    return int(row["n"] or 0) if row else 0


def test_a_scheduling_pass_with_nothing_pending_reads_no_running_allocation(
    api_master: Any, pg_url: str
) -> None:
    running, agents_n = 400, 100
    with psycopg.connect(pg_url, autocommit=True, row_factory=dict_row) as conn:
        for i in range(agents_n + 1):
            agent = f"agent-{i}"
            with conn.transaction():
                agents.heartbeat(conn, api_master.state, agent, _report(agent, 4, []))
        owner = conn.execute("SELECT id FROM users WHERE username = 'admin'").fetchone()
        conn.execute(
            "INSERT INTO jobs (id, kind, owner_id, resource_pool, priority, weight, queue_key)"
            " VALUES ('j', 'COMMAND', %s, 'default', 42, 1, 1)",
            (owner["id"],),
        )
        conn.execute(
            "INSERT INTO allocations (id, kind, task_id, job_id, resource_pool, slots_needed,"
            " state, token_hash, placement)"
            " SELECT 'run.' || i, 'COMMAND', 't.' || i, 'j', 'default', 1, 'RUNNING', 'h',"
            " jsonb_build_object('agent-' || (i %% %s), jsonb_build_array((i / %s)::text))"
            " FROM generate_series(0, %s - 1) i",
            (agents_n, agents_n, running),
        )
        conn.execute("ANALYZE")
        with conn.transaction():
            before = _all_reads(conn)
            scheduling.schedule_all(conn, api_master.state)
            read = _all_reads(conn) - before
        # Nothing waits, so there is nothing to decide: not every agent, slot and running
        # allocation with its job read again at each tick (900 rows here on the old pass).
        assert read <= 5, read

        conn.execute(
            "INSERT INTO allocations (id, kind, task_id, job_id, resource_pool, slots_needed,"
            " state, token_hash) VALUES ('new.1', 'COMMAND', 'n', 'j', 'default', 1,"
            " 'PENDING', 'h')"
        )
        with conn.transaction():
            scheduling.schedule_all(conn, api_master.state)
        row = conn.execute("SELECT state, placement FROM allocations WHERE id = 'new.1'").fetchone()
        assert row["state"] == "ASSIGNED" and row["placement"] == {"agent-100": ["0"]}, row
