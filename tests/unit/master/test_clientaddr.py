"""The client's address behind trusted proxies: the X-Forwarded-For chain walked from the right
while the hop is trusted (det.master.clientaddr)."""

from __future__ import annotations

from typing import Any

import pytest

from det.master.clientaddr import PEER_KEY, Proxies, TrustedProxies, parse_networks

PROXIES = Proxies(parse_networks(["10.0.0.0/8", "192.0.2.1", "fd00::/8"]))


@pytest.mark.parametrize(
    ("peer", "forwarded_for", "client"),
    [
        # An untrusted peer: its header is ignored whatever it says.
        ("203.0.113.9", "1.2.3.4", "203.0.113.9"),
        # A trusted peer: the address it appended.
        ("10.1.2.3", "198.51.100.7", "198.51.100.7"),
        # A client's own header before the proxy's entry is never reached.
        ("10.1.2.3", "1.1.1.1, 198.51.100.7", "198.51.100.7"),
        # A chain of trusted proxies is walked to the first untrusted hop.
        ("192.0.2.1", "1.1.1.1, 198.51.100.7, 10.4.4.4", "198.51.100.7"),
        # Every hop trusted: the left-most.
        ("10.1.2.3", "10.2.2.2, 10.3.3.3", "10.2.2.2"),
        # Several header lines arrive joined with commas.
        ("10.1.2.3", "1.1.1.1,198.51.100.7", "198.51.100.7"),
        # A malformed entry stops the walk at the proxy that passed it on.
        ("10.1.2.3", "198.51.100.7, garbage", "10.1.2.3"),
        ("10.1.2.3", "", "10.1.2.3"),
        # Ports and brackets as some proxies write them; IPv6; IPv4-mapped peers.
        ("10.1.2.3", "198.51.100.7:4711", "198.51.100.7"),
        ("10.1.2.3", "[2001:db8::5]:443", "2001:db8::5"),
        ("fd00::1", "2001:db8::5", "2001:db8::5"),
        ("::ffff:10.1.2.3", "198.51.100.7", "198.51.100.7"),
    ],
)
def test_the_client_is_the_right_most_untrusted_hop(
    peer: str, forwarded_for: str, client: str
) -> None:
    assert PROXIES.client(peer, forwarded_for) == client


def test_no_trusted_proxies_believe_nobody() -> None:
    assert Proxies([]).client("10.1.2.3", "198.51.100.7") == "10.1.2.3"


def test_the_scheme_only_from_a_trusted_peer() -> None:
    assert PROXIES.scheme("10.1.2.3", "https", "http") == "https"
    assert PROXIES.scheme("10.1.2.3", "http, https", "http") == "https"
    assert PROXIES.scheme("10.1.2.3", "gopher", "http") == "http"
    assert PROXIES.scheme("203.0.113.9", "https", "http") == "http"


def test_a_bad_entry_is_named() -> None:
    with pytest.raises(ValueError, match=r"entry 1: 'lb.example' is not an IP address"):
        parse_networks(["10.0.0.1", "lb.example"])


def _environ(peer: str, **headers: str) -> dict[str, Any]:
    env: dict[str, Any] = {"REMOTE_ADDR": peer, "wsgi.url_scheme": "http"}
    env.update({"HTTP_" + k.upper(): v for k, v in headers.items()})
    return env


def test_the_middleware_rewrites_trusted_requests_and_strips_untrusted_ones() -> None:
    seen: list[dict[str, Any]] = []
    app = TrustedProxies(lambda env, start: seen.append(dict(env)) or [], PROXIES)
    app(_environ("10.1.2.3", x_forwarded_for="198.51.100.7", x_forwarded_proto="https"), None)
    app(_environ("203.0.113.9", x_forwarded_for="198.51.100.7", forwarded="for=1.2.3.4"), None)
    trusted, untrusted = seen
    assert (trusted["REMOTE_ADDR"], trusted["wsgi.url_scheme"]) == ("198.51.100.7", "https")
    assert trusted[PEER_KEY] == "10.1.2.3"
    assert untrusted["REMOTE_ADDR"] == "203.0.113.9"
    assert "HTTP_X_FORWARDED_FOR" not in untrusted and "HTTP_FORWARDED" not in untrusted
