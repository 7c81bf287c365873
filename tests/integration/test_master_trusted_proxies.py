"""Trusted proxies: the login limits count the client an X-Forwarded-For names only when the
TCP peer is a listed proxy (``security.trusted_proxies``); any other peer's header is ignored.

On the in-process master (``api_master_factory``): the peer is the WSGI ``REMOTE_ADDR`` a live
master's server sets from the connection, 127.0.0.2 playing the trusted proxy and other
addresses untrusted clients. The master's refusal to start on a bad entry is in
test_master_auth.py, with its other refusals to start.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from det.master.services import login_limits
from tests.integration.conftest import ADMIN_PASSWORD
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration

PROXY = "127.0.0.2"
LIMIT = login_limits.MAX_FAILURES_PER_USER_AND_ADDRESS


def _login(
    master: InProcessMaster, password: str, *, source: str, forwarded_for: str | None = None
) -> int:
    headers = {} if forwarded_for is None else {"X-Forwarded-For": forwarded_for}
    r = master.new_session(remote_addr=source).post(
        master.url + "/api/v1/auth/login",
        json={"username": "admin", "password": password},
        headers=headers,
        timeout=30,
    )
    return r.status_code


@pytest.fixture
def behind_proxy(api_master_factory: Any) -> InProcessMaster:
    m: InProcessMaster = api_master_factory(extra={"security": {
        "initial_user_password": ADMIN_PASSWORD, "trusted_proxies": [PROXY, "10.9.0.0/16"],
    }})  # fmt: skip
    return m


def test_two_clients_behind_a_trusted_proxy_get_separate_limits(
    behind_proxy: InProcessMaster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    m = behind_proxy
    attacker, victim = "203.0.113.5", "198.51.100.7"
    for _ in range(LIMIT):
        assert _login(m, "wrong", source=PROXY, forwarded_for=attacker) == 401
    assert _login(m, ADMIN_PASSWORD, source=PROXY, forwarded_for=attacker) == 429
    # The attacker locked out only itself: another client behind the same proxy logs in.
    assert _login(m, ADMIN_PASSWORD, source=PROXY, forwarded_for=victim) == 200
    # The log names the client, not the proxy.
    assert f"from {attacker}" in caplog.text
    assert f"login as 'admin' from {PROXY} failed" not in caplog.text


def test_a_spoofed_start_of_the_chain_does_not_escape_the_limit(
    behind_proxy: InProcessMaster,
) -> None:
    m = behind_proxy
    # The client sends its own X-Forwarded-For; the trusted proxy appends the address it saw.
    for i in range(LIMIT):
        assert _login(m, "wrong", source=PROXY, forwarded_for=f"192.0.2.{i}, 203.0.113.9") == 401
    assert _login(m, ADMIN_PASSWORD, source=PROXY, forwarded_for="192.0.2.99, 203.0.113.9") == 429
    # A chain of trusted proxies (10.9.x.x behind 127.0.0.2) is walked to the client.
    assert _login(m, ADMIN_PASSWORD, source=PROXY, forwarded_for="203.0.113.9, 10.9.0.4") == 429
    assert _login(m, ADMIN_PASSWORD, source=PROXY, forwarded_for="203.0.113.10, 10.9.0.4") == 200


def test_an_untrusted_peer_cannot_choose_its_address(behind_proxy: InProcessMaster) -> None:
    m = behind_proxy
    # A client that is no listed proxy sends a new X-Forwarded-For each time: ignored, so it
    # cannot dodge its limit ...
    for i in range(LIMIT):
        assert _login(m, "wrong", source="127.0.0.3", forwarded_for=f"192.0.2.{i}") == 401
    assert _login(m, ADMIN_PASSWORD, source="127.0.0.3", forwarded_for="192.0.2.200") == 429
    # ... nor lock out the client it names.
    assert _login(m, ADMIN_PASSWORD, source=PROXY, forwarded_for="192.0.2.1") == 200


def test_without_trusted_proxies_the_header_is_ignored(api_master: InProcessMaster) -> None:
    m = api_master
    for i in range(LIMIT):
        assert _login(m, "wrong", source="127.0.0.4", forwarded_for=f"192.0.2.{i}") == 401
    assert _login(m, ADMIN_PASSWORD, source="127.0.0.4", forwarded_for="192.0.2.250") == 429
    assert _login(m, ADMIN_PASSWORD, source="127.0.0.5") == 200
