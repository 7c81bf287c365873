"""The embedded PostgreSQL's password file and pg_hba.conf check (no server: files only).
The server itself: tests/integration/test_embedded_db_closed.py."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from det.master.db import embedded

# What pgserver's initdb (--auth=trust) leaves, comments dropped.
TRUSTING_HBA = """\
local   all             all                                     trust
host    all             all             127.0.0.1/32            trust
host    all             all             ::1/128                 trust
local   replication     all                                     trust
"""


def test_the_password_is_made_once_readable_by_the_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "data" / embedded.PASSWORD_FILE
    first = embedded._password(path)
    assert len(first) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert embedded._password(path) == first
    assert [p.name for p in path.parent.iterdir()] == [embedded.PASSWORD_FILE]  # no temp left


def test_a_password_file_readable_by_others_is_closed(tmp_path: Path) -> None:
    path = tmp_path / embedded.PASSWORD_FILE
    path.write_text("kept-as-it-is\n")
    path.chmod(0o644)
    assert embedded._password(path) == "kept-as-it-is"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_empty_password_file_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / embedded.PASSWORD_FILE
    path.write_text("\n")
    with pytest.raises(embedded.EmbeddedDatabaseError, match=f"{path} is empty"):
        embedded._password(path)


@pytest.mark.parametrize(
    ("text", "closed"),
    [
        (embedded.HBA, True),
        ("# a comment\n\nlocal all all scram-sha-256  # ours\n", True),
        (TRUSTING_HBA, False),
        ("local all all md5\n", False),
        (embedded.HBA + "host all all 0.0.0.0/0 scram-sha-256\n", False),
        ("", False),
    ],
)
def test_only_the_masters_one_rule_counts_as_closed(
    tmp_path: Path, text: str, closed: bool
) -> None:
    hba = tmp_path / "pg_hba.conf"
    hba.write_text(text)
    assert embedded._closed(hba) is closed
