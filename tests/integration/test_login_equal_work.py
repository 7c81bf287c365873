"""An unknown username costs the same password check as a known one (no timing oracle).

On a real PostgreSQL (the ``migrated_db`` fixture): the login's own queries run as they do in
the master, so a change to how it reads the user cannot slip past a stand-in connection.
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg.rows import dict_row

from det.master.errors import Unauthenticated
from det.master.services import users


@pytest.mark.parametrize("known", [True, False])
def test_a_failed_login_runs_one_scrypt_check_whether_or_not_the_user_exists(
    monkeypatch: pytest.MonkeyPatch, migrated_db: str, known: bool
) -> None:
    checked: list[str] = []
    real = users.verify_password

    def counting(client_hashed: str, stored: str) -> bool:
        checked.append(stored)
        return real(client_hashed, stored)

    with psycopg.connect(migrated_db, row_factory=dict_row, autocommit=True) as conn:
        if known:
            users.create_user(conn, "someone", "pw", admin=False, hashed=False)
        monkeypatch.setattr(users, "verify_password", counting)
        with pytest.raises(Unauthenticated):
            users.login(conn, "someone", "wrong", hashed=False, session_hours=1)
    assert len(checked) == 1
    assert checked[0].startswith("scrypt$")
