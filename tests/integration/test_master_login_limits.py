"""Login throttling (429 after too many failures) and equal work for unknown usernames."""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from det.master.services import login_limits
from tests.integration.conftest import ADMIN_PASSWORD, Master

pytestmark = pytest.mark.integration


def _login(master: Master, username: str, password: str, source: str = "127.0.0.1") -> Any:
    """POST a login from the loopback address ``source`` (127.0.0.0/8 reaches the master)."""
    url = urlsplit(master.url)
    conn = http.client.HTTPConnection(
        url.hostname or "", url.port, timeout=10, source_address=(source, 0)
    )
    try:
        conn.request(
            "POST",
            "/api/v1/auth/login",
            body=json.dumps({"username": username, "password": password}),
            headers={"Content-Type": "application/json"},
        )
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), json.loads(r.read() or b"{}")
    finally:
        conn.close()


def test_too_many_wrong_passwords_then_429_even_for_the_right_one(live_master: Master) -> None:
    for _ in range(login_limits.MAX_FAILURES_PER_USER_AND_ADDRESS):
        assert _login(live_master, "admin", "wrong")[0] == 401
    status, headers, body = _login(live_master, "admin", ADMIN_PASSWORD)
    assert status == 429
    assert 0 < int(headers["Retry-After"]) <= login_limits.WINDOW.total_seconds()
    assert "too many failed logins" in body["message"]
    # Another address is not locked out: nobody can lock the admin out by failing on purpose.
    assert _login(live_master, "admin", ADMIN_PASSWORD, source="127.0.0.2")[0] == 200


def test_a_successful_login_clears_the_failures(live_master: Master) -> None:
    for _ in range(login_limits.MAX_FAILURES_PER_USER_AND_ADDRESS - 1):
        assert _login(live_master, "admin", "wrong")[0] == 401
    assert _login(live_master, "admin", ADMIN_PASSWORD)[0] == 200
    for _ in range(login_limits.MAX_FAILURES_PER_USER_AND_ADDRESS - 1):
        assert _login(live_master, "admin", "wrong")[0] == 401
    assert _login(live_master, "admin", ADMIN_PASSWORD)[0] == 200


def test_many_usernames_from_one_address_are_throttled(live_master: Master) -> None:
    for i in range(login_limits.MAX_FAILURES_PER_ADDRESS):
        assert _login(live_master, f"nobody-{i}", "x", source="127.0.0.3")[0] == 401
    assert _login(live_master, "admin", ADMIN_PASSWORD, source="127.0.0.3")[0] == 429
    assert _login(live_master, "admin", ADMIN_PASSWORD)[0] == 200


def test_wrong_method_answers_405_with_allow(live_master: Master) -> None:
    r = requests.delete(live_master.url + "/api/v1/auth/login", timeout=5)
    assert r.status_code == 405
    assert "POST" in r.headers["Allow"]
    assert r.json()["code"] == 12
