"""Port offsets (DET_UNIQUE_PORT_OFFSET; a served task listens at 2700 + its offset) on a real
PostgreSQL: chosen when the scheduler places an allocation, unique among the live allocations of
one host, and kept for the allocation's life.

The two allocation ids below hash to the same offset (819): before offsets were chosen, two
notebooks with them on one agent both listened on 3519 and the second exited."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import class_row, dict_row

from det.master import states
from det.master.services import allocation_rows, containers, task_services

pytestmark = pytest.mark.integration

Conn = psycopg.Connection[dict[str, Any]]

A = "675e0c9b-013a-4ae2-a0ea-0a2385e2eaaf.1"
B = "85e63643-0c8f-4954-a2cd-40b3ff3e65ea.1"


@pytest.fixture
def conn(migrated_db: str) -> Iterator[Conn]:
    with psycopg.connect(migrated_db, row_factory=dict_row, autocommit=True) as c:
        c.execute("INSERT INTO users (username, password_hash) VALUES ('u', 'x')")
        c.execute(
            "INSERT INTO jobs (id, owner_id, resource_pool, priority, queue_key)"
            " VALUES ('j', (SELECT id FROM users LIMIT 1), 'p', 42, 1)"
        )
        # a1 and a2 share a machine (one address); b is another machine.
        for agent, address in (("a1", "10.0.0.1"), ("a2", "10.0.0.1"), ("b", "10.0.0.2")):
            c.execute(
                "INSERT INTO agents (id, resource_pool, addresses) VALUES (%s, 'p', %s)",
                (agent, f'["{address}"]'),
            )
        yield c


def queue(conn: Conn, *ids: str) -> None:
    for aid in ids:
        conn.execute(
            "INSERT INTO allocations (id, kind, task_id, job_id, resource_pool, slots_needed,"
            " state, token_hash) VALUES (%s, 'NOTEBOOK', %s, 'j', 'p', 0, 'PENDING', 'h')",
            (aid, aid.split(".")[0]),
        )


def place(conn: Conn, placements: dict[str, dict[str, list[str]]]) -> None:
    """What the scheduler's pass does with its placements, in one transaction."""
    with conn.transaction():
        moved = states.allocations_placed(conn, placements)
        containers.choose_port_offsets(conn, {a: placements[a] for a in moved})


def offsets(conn: Conn) -> dict[str, int]:
    rows = conn.execute("SELECT id, port_offset FROM allocations ORDER BY id").fetchall()
    return {r["id"]: r["port_offset"] for r in rows}


def test_the_two_ids_do_collide_by_hash() -> None:
    # The premise of the tests below: without a choice both would get port 3519.
    assert containers._hashed_offset(A) == containers._hashed_offset(B) == 819


def test_two_allocations_on_one_agent_get_distinct_offsets_in_one_pass(conn: Conn) -> None:
    queue(conn, A, B)
    place(conn, {A: {"a1": []}, B: {"a1": []}})
    got = offsets(conn)
    assert got[A] != got[B] and {got[A], got[B]} == {819, 820}


def test_agents_of_one_machine_share_its_ports_and_another_machine_does_not(
    conn: Conn,
) -> None:
    queue(conn, A, B)
    place(conn, {A: {"a1": []}})
    place(conn, {B: {"a2": []}})  # a later pass, another agent at the same address
    assert offsets(conn) == {A: 819, B: 820}

    other = "c2d9a1a4-1111-4222-8333-944455556666.1"
    queue(conn, other)
    place(conn, {other: {"b": []}})
    assert offsets(conn)[other] == containers._hashed_offset(other)


def test_an_ended_allocation_frees_its_offset_and_a_placed_one_keeps_its_own(
    conn: Conn,
) -> None:
    queue(conn, A)
    place(conn, {A: {"a1": []}})
    conn.execute("UPDATE allocations SET state = 'TERMINATED' WHERE id = %s", (A,))
    queue(conn, B)
    place(conn, {B: {"a1": []}})
    assert offsets(conn)[B] == 819
    # Placing again what is no longer PENDING moves nothing and rechooses nothing.
    place(conn, {B: {"a2": []}})
    assert offsets(conn)[B] == 819


def test_an_allocation_placed_before_offsets_were_stored_keeps_its_hash_and_holds_it(
    conn: Conn,
) -> None:
    # Placed by a master before the column: NULL, its container listens at the hash's port.
    queue(conn, A)
    conn.execute(
        "UPDATE allocations SET state = 'RUNNING', placement = '{\"a1\": []}' WHERE id = %s", (A,)
    )
    cur = conn.cursor(row_factory=class_row(allocation_rows.Allocation))
    row = cur.execute(
        "SELECT " + allocation_rows._COLUMNS + " FROM allocations WHERE id = %s", (A,)
    ).fetchone()
    assert row is not None and row.port_offset is None
    assert task_services.service_port(containers.port_offset(row.id, row.port_offset)) == 3519
    queue(conn, B)
    place(conn, {B: {"a1": []}})
    assert offsets(conn)[B] == 820


def test_the_spec_reads_the_stored_offset(conn: Conn) -> None:
    queue(conn, A, B)
    place(conn, {A: {"a1": []}, B: {"a1": []}})
    for aid in (A, B):
        alloc = allocation_rows.get(conn, aid)
        assert alloc is not None and alloc.port_offset is not None
        assert containers.port_offset(alloc.id, alloc.port_offset) == offsets(conn)[aid]
