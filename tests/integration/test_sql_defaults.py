"""The SQL functions that write a config default again answer as the expconf model does
(tests/sql_defaults.py lists them; tests/unit/master/test_defaults_once.py makes sure every
such function is listed). Real PostgreSQL, every migration applied."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.sql_defaults import SQL_DEFAULTS, SqlDefault


def disagreements(conn: psycopg.Connection[tuple[object, ...]], entry: SqlDefault) -> list[str]:
    """Where the function's answer is not the one the model implies."""

    def ask(config: object) -> object:
        row = conn.execute(entry.query, (Jsonb(config),)).fetchone()
        assert row is not None
        return row[0]

    # The function reads the field: each value gives its own answer; without the field (or
    # with null, "the default" in a dumped config) it must answer for the model's default.
    cases = [(f"{entry.field}={v!r}", entry.config(v), entry.answer(v)) for v in entry.values]
    cases.append((f"{entry.field} absent", entry.absent, entry.answer(entry.default)))
    cases.append((f"{entry.field}=None", entry.config(None), entry.answer(entry.default)))
    return [
        f"{entry.function}, {what}: {got!r}, the model's default says {want!r}"
        for what, config, want in cases
        if (got := ask(config)) != want
    ]


@pytest.mark.parametrize("entry", SQL_DEFAULTS, ids=lambda e: e.function)
def test_a_functions_fallback_is_the_models_default(migrated_db: str, entry: SqlDefault) -> None:
    with psycopg.connect(migrated_db) as conn:
        assert disagreements(conn, entry) == []


def test_a_function_whose_fallback_drifted_is_found(migrated_db: str) -> None:
    """As if a migration had replaced the function with another default (this database only)."""
    with psycopg.connect(migrated_db) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION det_larger_is_better(config jsonb) RETURNS boolean"
            " LANGUAGE sql IMMUTABLE AS $$"
            " SELECT coalesce((config->'searcher'->>'smaller_is_better') <> 'true', true) $$"
        )
        (entry,) = [e for e in SQL_DEFAULTS if e.function == "det_larger_is_better"]
        assert [d.split(":")[0] for d in disagreements(conn, entry)] == [
            "det_larger_is_better, smaller_is_better absent",
            "det_larger_is_better, smaller_is_better=None",
        ]
