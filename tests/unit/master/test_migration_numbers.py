"""Migrations are keyed by their number in ``schema_migrations``: two files with one number (two
branches that each added the next one) would leave the second unapplied, so the list refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from det.master import db


def test_the_shipped_migrations_have_distinct_increasing_numbers() -> None:
    versions = [v for v, _, _ in db._migrations()]
    assert versions == sorted(set(versions))
    assert versions[0] == 1


def test_two_migrations_with_one_number_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "migrations"
    folder.mkdir()
    for name in ("0001_a.sql", "0002_b.sql", "0002_c.sql"):
        (folder / name).write_text("SELECT 1;")
    monkeypatch.setattr(db.resources, "files", lambda _package: tmp_path)
    with pytest.raises(
        RuntimeError, match=r"two migrations are numbered 0002: 0002_b\.sql and 0002_c"
    ):
        db._migrations()
