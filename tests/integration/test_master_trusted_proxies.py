"""Trusted proxies: the login limits count the client an X-Forwarded-For names only when the
TCP peer is a listed proxy (``security.trusted_proxies``); any other peer's header is ignored.

The master listens on loopback; connections from 127.0.0.2 play the trusted proxy, from other
127.0.0.0/8 addresses untrusted clients (a socket may bind any of them as its source).
"""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit

import pytest

from det.master.services import login_limits
from tests.integration.conftest import ADMIN_PASSWORD, Master, wait_for

pytestmark = pytest.mark.integration

PROXY = "127.0.0.2"
LIMIT = login_limits.MAX_FAILURES_PER_USER_AND_ADDRESS


def _login(master: Master, password: str, *, source: str, forwarded_for: str | None = None) -> int:
    url = urlsplit(master.url)
    conn = http.client.HTTPConnection(
        url.hostname or "", url.port, timeout=30, source_address=(source, 0)
    )
    headers = {"Content-Type": "application/json"}
    if forwarded_for is not None:
        headers["X-Forwarded-For"] = forwarded_for
    try:
        conn.request(
            "POST",
            "/api/v1/auth/login",
            body=json.dumps({"username": "admin", "password": password}),
            headers=headers,
        )
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


@pytest.fixture
def behind_proxy(master_factory: Any) -> Master:
    m: Master = master_factory(extra={"security": {
        "initial_user_password": ADMIN_PASSWORD, "trusted_proxies": [PROXY, "10.9.0.0/16"],
    }})  # fmt: skip
    return m


def test_two_clients_behind_a_trusted_proxy_get_separate_limits(behind_proxy: Master) -> None:
    m = behind_proxy
    attacker, victim = "203.0.113.5", "198.51.100.7"
    for _ in range(LIMIT):
        assert _login(m, "wrong", source=PROXY, forwarded_for=attacker) == 401
    assert _login(m, ADMIN_PASSWORD, source=PROXY, forwarded_for=attacker) == 429
    # The attacker locked out only itself: another client behind the same proxy logs in.
    assert _login(m, ADMIN_PASSWORD, source=PROXY, forwarded_for=victim) == 200
    # The log names the client, not the proxy.
    wait_for(lambda: f"from {attacker}" in m.logs(), 30, what="the failed login in the log")
    assert f"login as 'admin' from {PROXY} failed" not in m.logs()


def test_a_spoofed_start_of_the_chain_does_not_escape_the_limit(behind_proxy: Master) -> None:
    m = behind_proxy
    # The client sends its own X-Forwarded-For; the trusted proxy appends the address it saw.
    for i in range(LIMIT):
        assert _login(m, "wrong", source=PROXY, forwarded_for=f"192.0.2.{i}, 203.0.113.9") == 401
    assert _login(m, ADMIN_PASSWORD, source=PROXY, forwarded_for="192.0.2.99, 203.0.113.9") == 429
    # A chain of trusted proxies (10.9.x.x behind 127.0.0.2) is walked to the client.
    assert _login(m, ADMIN_PASSWORD, source=PROXY, forwarded_for="203.0.113.9, 10.9.0.4") == 429
    assert _login(m, ADMIN_PASSWORD, source=PROXY, forwarded_for="203.0.113.10, 10.9.0.4") == 200


def test_an_untrusted_peer_cannot_choose_its_address(behind_proxy: Master) -> None:
    m = behind_proxy
    # A client that is no listed proxy sends a new X-Forwarded-For each time: ignored, so it
    # cannot dodge its limit ...
    for i in range(LIMIT):
        assert _login(m, "wrong", source="127.0.0.3", forwarded_for=f"192.0.2.{i}") == 401
    assert _login(m, ADMIN_PASSWORD, source="127.0.0.3", forwarded_for="192.0.2.200") == 429
    # ... nor lock out the client it names.
    assert _login(m, ADMIN_PASSWORD, source=PROXY, forwarded_for="192.0.2.1") == 200


def test_without_trusted_proxies_the_header_is_ignored(live_master: Master) -> None:
    m = live_master
    for i in range(LIMIT):
        assert _login(m, "wrong", source="127.0.0.4", forwarded_for=f"192.0.2.{i}") == 401
    assert _login(m, ADMIN_PASSWORD, source="127.0.0.4", forwarded_for="192.0.2.250") == 429
    assert _login(m, ADMIN_PASSWORD, source="127.0.0.5") == 200


def test_a_bad_entry_stops_the_master_naming_it(master_factory: Any) -> None:
    with pytest.raises(RuntimeError, match=r"security.trusted_proxies.*entry 1: 'lb.example'"):
        master_factory(extra={"security": {
            "initial_user_password": ADMIN_PASSWORD, "trusted_proxies": ["10.0.0.1", "lb.example"],
        }})  # fmt: skip
