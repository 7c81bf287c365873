"""The client's address and scheme behind trusted proxies (``security.trusted_proxies``).

A load balancer or reverse proxy in front of the master opens its own connections: the TCP
peer is the proxy, and the client's address travels in ``X-Forwarded-For`` (each proxy appends
the address it received the request from) and the scheme in ``X-Forwarded-Proto``. Any client
can send those headers, so they are believed only from a peer in the configured list, and
only hop by hop: starting from the peer, the chain is walked from its right end while the
current hop is a trusted proxy; the first address that is not (or the left end of the chain)
is the client. A spoofed left part of the chain is therefore never reached as long as the
last trusted proxy appended what it saw, and a malformed entry stops the walk at the proxy
that passed it on.

:class:`TrustedProxies` applies this once per request, as WSGI middleware: ``REMOTE_ADDR``
and ``wsgi.url_scheme`` are the client's for everything after it (the login limits, logs);
the peer stays in ``det.peer_addr``. An untrusted peer's forwarding headers are removed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the standard library's WSGI types exist for type checkers only
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

PEER_KEY = "det.peer_addr"


def parse_networks(entries: Iterable[str]) -> list[Network]:
    """Addresses (``10.0.0.7``) and networks (``10.0.0.0/16``, ``fd00::/8``); raises
    ``ValueError`` naming the entry (from 0) that is neither."""
    out: list[Network] = []
    for i, entry in enumerate(entries):
        try:
            out.append(ipaddress.ip_network(str(entry).strip(), strict=False))
        except ValueError:
            raise ValueError(
                f"entry {i}: {entry!r} is not an IP address or network (such as 10.0.0.0/16)"
            ) from None
    return out


def parse_address(text: str) -> Address | None:
    """An address as proxies write it in ``X-Forwarded-For`` (``1.2.3.4``, ``1.2.3.4:5678``,
    ``2001:db8::1``, ``[2001:db8::1]:443``), IPv4-mapped IPv6 as IPv4; None when malformed."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


class Proxies:
    def __init__(self, networks: Iterable[Network]) -> None:
        self.networks = tuple(networks)

    def trusts(self, addr: Address | None) -> bool:
        return addr is not None and any(addr in n for n in self.networks)

    def client(self, peer: str, forwarded_for: str | None) -> str:
        """The client's address for a request from ``peer`` carrying ``forwarded_for`` (every
        ``X-Forwarded-For`` line joined with commas)."""
        current = parse_address(peer)
        if not self.trusts(current) or not forwarded_for:
            return peer
        client = str(current)
        for entry in reversed(forwarded_for.split(",")):
            hop = parse_address(entry)
            if hop is None:
                break  # the trusted proxy passed on garbage: it is the last hop we know
            client = str(hop)
            if not self.trusts(hop):
                break
        return client

    def scheme(self, peer: str, forwarded_proto: str | None, default: str) -> str:
        """``http`` or ``https`` as the nearest trusted proxy saw it, else ``default``."""
        if not forwarded_proto or not self.trusts(parse_address(peer)):
            return default
        last = forwarded_proto.split(",")[-1].strip().lower()
        return last if last in ("http", "https") else default


class TrustedProxies:
    """WSGI middleware: ``REMOTE_ADDR`` and ``wsgi.url_scheme`` become the client's."""

    def __init__(self, app: WSGIApplication, proxies: Proxies) -> None:
        self.app = app
        self.proxies = proxies

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        peer = environ.get("REMOTE_ADDR") or ""
        environ[PEER_KEY] = peer
        if self.proxies.trusts(parse_address(peer)):
            environ["REMOTE_ADDR"] = self.proxies.client(peer, environ.get("HTTP_X_FORWARDED_FOR"))
            environ["wsgi.url_scheme"] = self.proxies.scheme(
                peer, environ.get("HTTP_X_FORWARDED_PROTO"), environ.get("wsgi.url_scheme", "http")
            )
        else:
            # Whatever an untrusted peer claims, nothing after this reads it.
            for name in _FORWARDING_HEADERS:
                environ.pop(name, None)
        return self.app(environ, start_response)


_FORWARDING_HEADERS = (
    "HTTP_X_FORWARDED_FOR",
    "HTTP_X_FORWARDED_PROTO",
    "HTTP_X_FORWARDED_HOST",
    "HTTP_X_FORWARDED_PORT",
    "HTTP_X_FORWARDED_BY",
    "HTTP_FORWARDED",
)
