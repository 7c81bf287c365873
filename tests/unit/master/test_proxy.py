"""The task proxy's handling of a request head: which requests are its, whose token, and what
goes on to the task (never the caller's credentials; one request per connection unless it
upgrades)."""

from __future__ import annotations

import time

import pytest

from det.master.proxy import forwarded_head, parse_head, token_of, wants_proxy

TID = "0b6f1f5e-1f5e-4c1a-9b7e-2f1d3c4b5a69"


def head(*lines: str, target: str = f"/proxy/{TID}/lab") -> bytes:
    return "\r\n".join([f"GET {target} HTTP/1.1", "Host: m:8080", *lines]).encode()


def test_only_proxy_paths_are_the_proxys() -> None:
    assert wants_proxy(head())
    assert not wants_proxy(head(target="/api/v1/proxyish"))
    assert not wants_proxy(head(target="/det/proxy/x"))
    assert not wants_proxy(b"garbage")


def test_token_from_the_bearer_header_never_a_cookie() -> None:
    assert token_of(parse_head(head("Authorization: Bearer abc"))) == "abc"
    # Determined's WebUI cookie (which a task's page could plant) is no session here.
    assert token_of(parse_head(head("Cookie: theme=dark; auth=xyz"))) is None
    assert token_of(parse_head(head("Authorization: Basic abc"))) is None
    assert token_of(parse_head(head())) is None
    assert parse_head(head()).task_id == TID


def test_the_callers_credentials_never_reach_the_task() -> None:
    h = parse_head(head("Authorization: Bearer secret", "Cookie: auth=secret; _xsrf=1",
                        "Connection: keep-alive"))  # fmt: skip
    out = forwarded_head(h, "svc").decode()
    assert "secret" not in out
    assert "Authorization: token svc" in out
    assert "Cookie: _xsrf=1" in out
    assert out.count("Connection:") == 1 and "Connection: close" in out
    assert out.endswith("\r\n\r\n")


def test_an_upgrade_keeps_its_connection() -> None:
    h = parse_head(head("Connection: Upgrade", "Upgrade: websocket", "Cookie: auth=s"))
    assert h.upgrade
    out = forwarded_head(h, "svc").decode()
    assert "Connection: Upgrade" in out and "Connection: close" not in out
    assert "Cookie" not in out


def test_connections_past_the_cap_get_a_503_and_free_their_slot_when_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket
    import threading

    from det.master import proxy

    release = threading.Event()
    served: list[socket.socket] = []

    def serve(state: object, sock: socket.socket, data: bytes, **_: object) -> None:
        served.append(sock)
        release.wait(10)
        sock.close()

    monkeypatch.setattr(proxy, "serve", serve)
    monkeypatch.setattr(proxy, "_slots", threading.BoundedSemaphore(2))
    monkeypatch.setattr(proxy, "MAX_CONNECTIONS", 2)
    monkeypatch.setattr(proxy, "_state", [object()])
    pairs = [socket.socketpair() for _ in range(4)]
    for ours, _ in pairs[:3]:
        proxy.start(ours, b"GET /proxy/x/ HTTP/1.1\r\n\r\n")
    refused = pairs[2][1].recv(4096).decode()
    assert refused.startswith("HTTP/1.1 503") and "serving 2 connections" in refused
    release.set()
    deadline = time.monotonic() + 10
    while len(served) < 2 or any(s.fileno() != -1 for s in served):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.1)  # the threads release their slots after serve returns
    release.clear()
    proxy.start(pairs[3][0], b"GET /proxy/x/ HTTP/1.1\r\n\r\n")
    deadline = time.monotonic() + 10
    while len(served) < 3:
        assert time.monotonic() < deadline, "a freed slot serves the next connection"
        time.sleep(0.01)
    release.set()
    while served[-1].fileno() != -1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for pair in pairs:
        for s in pair:
            s.close()
