"""The proxy refuses a task's state-changing requests and WebSockets from another origin
(Jupyter's own XSRF and Origin checks are off for the token the proxy adds); reads, same-origin
writes and clients that are not browsers pass."""

from __future__ import annotations

import pytest

from det.master.proxy_origin import origin_of, refusal

HOST = "127.0.0.1:8080"


@pytest.mark.parametrize(
    ("method", "upgrade", "origin", "site"),
    [
        ("POST", False, "http://evil.example", None),
        ("POST", False, "http://127.0.0.1:9999", "same-site"),  # another port: same site
        ("POST", False, "http://127.0.0.1:9999", None),
        ("PUT", False, "null", None),  # a sandboxed frame, a data: URL
        ("DELETE", False, None, "cross-site"),
        ("GET", True, "http://localhost:8080", None),  # a WebSocket from another host name
        ("GET", True, None, "same-site"),
        ("POST", False, "http://127.0.0.1:8080.evil.example", None),
        ("POST", False, "not a url", None),
    ],
)
def test_a_cross_origin_write_or_websocket_is_refused(
    method: str, upgrade: bool, origin: str | None, site: str | None
) -> None:
    why = refusal(method, upgrade, HOST, origin, site)
    assert why is not None and why.startswith("cross-origin request refused")
    assert "\n" not in why


@pytest.mark.parametrize(
    ("method", "upgrade", "origin", "site"),
    [
        ("GET", False, "http://evil.example", "cross-site"),  # a read: the browser hides it
        ("HEAD", False, None, "cross-site"),
        ("OPTIONS", False, "http://evil.example", None),  # a preflight: Jupyter denies CORS
        ("POST", False, "http://127.0.0.1:8080", "same-origin"),
        ("POST", False, "HTTP://127.0.0.1:8080", None),
        ("POST", False, None, None),  # the CLI, the SDK
        ("GET", True, "http://127.0.0.1:8080", "same-origin"),
        ("GET", True, None, None),  # det shell's WebSocket
        ("POST", False, None, "none"),  # typed in the address bar
    ],
)
def test_reads_same_origin_writes_and_non_browsers_pass(
    method: str, upgrade: bool, origin: str | None, site: str | None
) -> None:
    assert refusal(method, upgrade, HOST, origin, site) is None


def test_default_ports_and_the_masters_public_url() -> None:
    assert refusal("POST", False, "det.example.com", "https://det.example.com:443", None) is None
    assert refusal("POST", False, "det.example.com:80", "http://det.example.com", None) is None
    # Behind a proxy that rewrote Host: the master's public URL is the task's origin too.
    public = ("https://det.example.com/",)
    assert refusal("POST", False, HOST, "https://det.example.com", None, public) is None
    assert refusal("POST", False, HOST, "https://evil.example", None, public) is not None


def test_origin_of() -> None:
    assert origin_of("http://A:1/x") == ("a", 1)
    assert origin_of("https://a") == ("a", 443)
    assert origin_of("null") is None
    assert origin_of("file:///etc") is None
