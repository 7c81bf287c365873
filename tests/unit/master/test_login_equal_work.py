"""An unknown username costs the same password check as a known one (no timing oracle)."""

from __future__ import annotations

from typing import Any

import pytest

from det.master.errors import Unauthenticated
from det.master.services import users


class _Conn:
    """Answers the one SELECT ``users.login`` makes before it fails."""

    def __init__(self, row: dict[str, Any] | None) -> None:
        self._row = row

    def execute(self, sql: str, params: Any = None) -> _Conn:
        assert sql.startswith("SELECT * FROM users")
        return self

    def fetchone(self) -> dict[str, Any] | None:
        return self._row


@pytest.mark.parametrize("known", [True, False])
def test_a_failed_login_runs_one_scrypt_check_whether_or_not_the_user_exists(
    monkeypatch: pytest.MonkeyPatch, known: bool
) -> None:
    row = {"id": 1, "active": True, "password_hash": users.hash_password(users.client_hash("pw"))}
    checked: list[str] = []
    real = users.verify_password

    def counting(client_hashed: str, stored: str) -> bool:
        checked.append(stored)
        return real(client_hashed, stored)

    monkeypatch.setattr(users, "verify_password", counting)
    with pytest.raises(Unauthenticated):
        users.login(
            _Conn(row if known else None),  # type: ignore[arg-type]
            "someone",
            "wrong",
            hashed=False,
            session_hours=1,
        )
    assert len(checked) == 1
    assert checked[0].startswith("scrypt$")
