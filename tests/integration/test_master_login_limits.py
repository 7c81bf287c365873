"""Login throttling (429 after too many failures) and equal work for unknown usernames, on
the in-process master (the client address is the WSGI peer a live master would see)."""

from __future__ import annotations

from typing import Any

import pytest

from det.master.services import login_limits
from tests.integration.conftest import ADMIN_PASSWORD
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration


def _login(master: InProcessMaster, username: str, password: str, source: str = "127.0.0.1") -> Any:
    """POST a login from the client address ``source`` (the peer the master sees)."""
    r = master.new_session(remote_addr=source).post(
        master.url + "/api/v1/auth/login",
        json={"username": username, "password": password},
        timeout=10,
    )
    return r.status_code, dict(r.headers), r.json() if r.content else {}


def test_too_many_wrong_passwords_then_429_even_for_the_right_one(
    api_master: InProcessMaster,
) -> None:
    for _ in range(login_limits.MAX_FAILURES_PER_USER_AND_ADDRESS):
        assert _login(api_master, "admin", "wrong")[0] == 401
    status, headers, body = _login(api_master, "admin", ADMIN_PASSWORD)
    assert status == 429
    assert 0 < int(headers["Retry-After"]) <= login_limits.WINDOW.total_seconds()
    assert "too many failed logins" in body["message"]
    # Another address is not locked out: nobody can lock the admin out by failing on purpose.
    assert _login(api_master, "admin", ADMIN_PASSWORD, source="127.0.0.2")[0] == 200


def test_a_successful_login_clears_the_failures(api_master: InProcessMaster) -> None:
    for _ in range(login_limits.MAX_FAILURES_PER_USER_AND_ADDRESS - 1):
        assert _login(api_master, "admin", "wrong")[0] == 401
    assert _login(api_master, "admin", ADMIN_PASSWORD)[0] == 200
    for _ in range(login_limits.MAX_FAILURES_PER_USER_AND_ADDRESS - 1):
        assert _login(api_master, "admin", "wrong")[0] == 401
    assert _login(api_master, "admin", ADMIN_PASSWORD)[0] == 200


def test_many_usernames_from_one_address_are_throttled(api_master: InProcessMaster) -> None:
    for i in range(login_limits.MAX_FAILURES_PER_ADDRESS):
        assert _login(api_master, f"nobody-{i}", "x", source="127.0.0.3")[0] == 401
    assert _login(api_master, "admin", ADMIN_PASSWORD, source="127.0.0.3")[0] == 429
    assert _login(api_master, "admin", ADMIN_PASSWORD)[0] == 200


def test_wrong_method_answers_405_with_allow(api_master: InProcessMaster) -> None:
    r = api_master.new_session().delete(api_master.url + "/api/v1/auth/login", timeout=5)
    assert r.status_code == 405
    assert "POST" in r.headers["Allow"]
    assert r.json()["code"] == 12
