"""master/db's typed reads (issue 42, build 1): a read without a row factory is opaque to mypy
(``row["x"]`` is a type error), and the helpers give each shape a type, checked at run time
against the kind asked for (real PostgreSQL)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from det.master import db

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def conn(pg_url: str) -> Iterator[db.Conn]:
    # A connection of its own, as the pool's (dict rows at run time, opaque to mypy).
    with db.connect(pg_url) as c:
        c.execute(
            "CREATE TABLE things (id int PRIMARY KEY, name text, weight double precision,"
            " made_at timestamptz NOT NULL DEFAULT now())"
        )
        c.execute("INSERT INTO things (id, name, weight) VALUES (1, 'a', 1.5), (2, NULL, 2.0)")
        yield c


@dataclasses.dataclass(frozen=True, slots=True)
class Thing:
    id: int
    name: str | None
    weight: float


def test_scalar_is_the_kind_asked_for_or_none(conn: db.Conn) -> None:
    assert db.scalar(conn, str, "SELECT name FROM things WHERE id = %s", (1,)) == "a"
    assert db.scalar(conn, str, "SELECT name FROM things WHERE id = %s", (2,)) is None  # NULL
    assert db.scalar(conn, str, "SELECT name FROM things WHERE id = %s", (3,)) is None  # no row
    made = db.scalar(conn, dt.datetime, "SELECT made_at FROM things WHERE id = 1")
    assert isinstance(made, dt.datetime)
    assert db.scalar(conn, bool, "SELECT EXISTS (SELECT 1 FROM things)") is True


def test_a_value_of_another_kind_is_refused_naming_the_query(conn: db.Conn) -> None:
    # A double precision is a float, not an int: caught on the first read.
    with pytest.raises(TypeError, match=r"expected int, got float from 'SELECT weight FROM"):
        db.scalar(conn, int, "SELECT weight FROM things WHERE id = 1")
    with pytest.raises(TypeError, match="expected str, got NoneType"):
        db.column(conn, str, "SELECT name FROM things ORDER BY id")


def test_one_int_column_and_exists(conn: db.Conn) -> None:
    assert db.one_int(conn, "SELECT count(*) FROM things") == 2
    assert db.one_int(conn, "INSERT INTO things (id) VALUES (7) RETURNING id") == 7
    with pytest.raises(LookupError, match="no value from"):
        db.one_int(conn, "SELECT id FROM things WHERE id = 99")
    assert db.column(conn, int, "SELECT id FROM things ORDER BY id") == [1, 2, 7]
    assert db.column(conn, int, "SELECT id FROM things WHERE id > 99") == []
    assert db.exists(conn, "SELECT 1 FROM things WHERE id = %s", (2,))
    assert not db.exists(conn, "SELECT 1 FROM things WHERE id = %s", (3,))


def test_rows_read_into_their_class(conn: db.Conn) -> None:
    query = "SELECT id, name, weight FROM things WHERE id < 7 ORDER BY id"
    assert db.fetch_rows(conn, Thing, query) == [Thing(1, "a", 1.5), Thing(2, None, 2.0)]
    assert db.fetch_row(conn, Thing, query) == Thing(1, "a", 1.5)
    assert db.fetch_row(conn, Thing, query + " LIMIT 0") is None


def test_an_untyped_row_read_is_a_type_error(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    subprocess.run(
        ["bash", str(REPO / "scripts" / "mypy-tree.sh"), str(tree)], check=True, timeout=60
    )
    (tree / "reads.py").write_text(
        textwrap.dedent(
            """
            from det.master import db

            def untyped(conn: db.Conn) -> object:
                row = conn.execute("SELECT id FROM things").fetchone()
                assert row is not None
                return row["id"]

            def typed(conn: db.Conn) -> int:
                return db.one_int(conn, "SELECT count(*) FROM things")

            def own_connection(conninfo: str) -> object:
                with db.connect(conninfo) as conn:
                    row = conn.execute("SELECT id FROM things").fetchone()
                    assert row is not None
                    return row["id"]
            """
        )
    )
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
         "--ignore-missing-imports", "--cache-dir", str(tmp_path / "cache"), "reads.py"],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={"MYPYPATH": str(tree), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    errors = [line for line in r.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 2, r.stdout + r.stderr
    assert 'reads.py:7: error: Value of type "UntypedRow" is not indexable' in errors[0]
    assert 'reads.py:16: error: Value of type "UntypedRow" is not indexable' in errors[1]
