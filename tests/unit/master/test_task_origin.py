"""Where interactive tasks are served (det.master.task_origin): the config's ``task_origin``
and ``task_port`` rules, the origin a browser is sent to, which hosts are the task origin's,
and which of a task's response headers reach the browser."""

from __future__ import annotations

import pytest

from det.master.config import MasterConfigError, parse_config
from det.master.task_origin import (
    ResponseFilter,
    filter_response_head,
    host_label,
    host_task,
    origin,
)

TID = "0b6f1f5e-1f5e-4c1a-9b7e-2f1d3c4b5a69"


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("tasks.example.com", "scheme://host"),
        ("https://tasks.example.com/path", "no path"),
        ("https://a.{task}.example.com", "first label"),
        ("ftp://tasks.example.com", "http or https"),
        ("https://tasks.example.com:99999", "out of range"),
    ],
)
def test_a_bad_task_origin_is_refused_naming_the_field(value: str, rule: str) -> None:
    with pytest.raises(MasterConfigError, match=r"task_origin") as e:
        parse_config({"task_origin": value}, env={})
    assert rule in str(e.value) and "\n" not in str(e.value)


def test_the_task_origin_is_never_the_masters() -> None:
    with pytest.raises(MasterConfigError, match="task_port: must differ from port"):
        parse_config({"port": 8080, "task_port": 8080}, env={})
    with pytest.raises(MasterConfigError, match="must not be the master's own origin"):
        parse_config(
            {"master_url": "https://det.example.com", "task_origin": "https://det.example.com"},
            env={},
        )
    with pytest.raises(MasterConfigError, match="task_port: null needs task_origin"):
        parse_config({"task_port": None}, env={})
    cfg = parse_config({}, env={"DET_TASK_ORIGIN": "https://{task}.t.example.com/"})
    assert cfg.task_origin == "https://{task}.t.example.com" and cfg.task_port == 0


def test_a_browser_on_this_machine_gets_an_origin_per_task_and_elsewhere_the_task_port() -> None:
    cfg = parse_config({}, env={})
    assert origin(cfg, 8081, "127.0.0.1:8080", TID) == f"http://{TID}.localhost:8081"
    assert origin(cfg, 8081, "localhost:8080", TID) == f"http://{TID}.localhost:8081"
    assert origin(cfg, 8081, "10.1.2.3:8080", TID) == "http://10.1.2.3:8081"
    per_task = parse_config({"task_origin": "https://{task}.t.example.com"}, env={})
    assert origin(per_task, 8081, "det.example.com", TID) == f"https://{TID}.t.example.com"


def test_hosts_of_the_task_origin_and_the_task_they_name() -> None:
    per_task = parse_config({"task_origin": "https://{task}.t.example.com"}, env={})
    assert host_task(per_task, f"{TID}.t.example.com") == TID
    assert host_task(per_task, f"{TID}.t.example.com:443") == TID
    assert host_task(per_task, "det.example.com") is None
    assert host_task(per_task, f"{TID}.t.example.com.evil.com") is None
    shared = parse_config({"task_origin": "http://tasks.example.com:8081"}, env={})
    assert host_task(shared, "tasks.example.com:8081") == ""
    assert host_task(shared, "tasks.example.com:8080") is None
    assert host_label(parse_config({}, env={}), f"{TID}.localhost:8081") == TID
    assert host_label(parse_config({}, env={}), "127.0.0.1:8081") is None


def _cookies(head: bytes) -> list[str]:
    return [
        line.split(b":", 1)[1].strip().decode()
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"set-cookie:")
    ]


def test_a_task_sets_only_its_own_cookies_on_the_task_origin() -> None:
    head = "\r\n".join(
        [
            "HTTP/1.1 200 OK",
            "Set-Cookie: auth=x; Path=/",
            "Set-Cookie: det_task=x",
            "Set-Cookie: DET_ticket=x",
            "set-cookie: wide=1; Path=/",
            f"Set-Cookie: other=1; Path=/proxy/{TID}x/",
            f"Set-Cookie: dom=1; Domain=localhost; Path=/proxy/{TID}/",
            "Set-Cookie: __Host-x=1; Path=/; Secure",
            f"Set-Cookie: _xsrf=2; Path=/proxy/{TID}/",
            f"Set-Cookie: exact=3; Path=/proxy/{TID}",
            "Set-Cookie: implicit=4",
            "Content-Type: text/html",
        ]
    ).encode()
    out = filter_response_head(head, TID, task_origin=True)
    assert _cookies(out) == [
        f"_xsrf=2; Path=/proxy/{TID}/",
        f"exact=3; Path=/proxy/{TID}",
        "implicit=4",
    ]
    assert b"Content-Type: text/html" in out
    webui = filter_response_head(head, TID, task_origin=False)
    assert _cookies(webui) == [] and webui.endswith(b"Content-Security-Policy: sandbox")


def test_the_filter_reads_heads_split_across_chunks_and_passes_bodies_as_they_are() -> None:
    f = ResponseFilter(TID, task_origin=True)
    assert f.feed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nSet-") == (
        b"HTTP/1.1 100 Continue\r\n\r\n"
    )
    out = f.feed(b"Cookie: auth=x; Path=/\r\nContent-Length: 2\r\n\r\nok")
    assert out == b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    assert f.feed(b"\r\n\r\nSet-Cookie: auth=y\r\n\r\n") == b"\r\n\r\nSet-Cookie: auth=y\r\n\r\n"
    ws = ResponseFilter(TID, task_origin=True)
    frames = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x02hi"
    assert ws.feed(frames) == frames


def test_the_task_listener_waits_for_a_bounded_number_of_heads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Clients that connect and send nothing hold at most MAX_PENDING_HEADS threads; past that a
    connection is closed unread, and a freed slot takes the next one."""
    import socket
    import threading
    import time

    from det.master import proxy

    started: list[bytes] = []
    monkeypatch.setattr(proxy, "MAX_PENDING_HEADS", 1)

    def start(sock: socket.socket, data: bytes, **_: object) -> None:
        started.append(data)
        sock.close()

    monkeypatch.setattr(proxy, "start", start)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    threading.Thread(target=proxy.serve_task_listener, args=(listener, None), daemon=True).start()
    try:
        silent = socket.create_connection(("127.0.0.1", port), timeout=10)
        time.sleep(0.3)  # accepted: its thread waits for a head
        extra = socket.create_connection(("127.0.0.1", port), timeout=10)
        assert extra.recv(1) == b"", "a connection past the cap is closed unread"
        extra.close()
        silent.sendall(b"GET /proxy/x/ HTTP/1.1\r\nHost: a\r\n\r\n")
        deadline = time.monotonic() + 10
        while not started:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.1)  # the slot is released once the head is read
        after = socket.create_connection(("127.0.0.1", port), timeout=10)
        after.sendall(b"GET /proxy/y/ HTTP/1.1\r\nHost: a\r\n\r\n")
        while len(started) < 2:
            assert time.monotonic() < deadline, "a freed slot serves the next connection"
            time.sleep(0.01)
        silent.close()
        after.close()
    finally:
        listener.close()
