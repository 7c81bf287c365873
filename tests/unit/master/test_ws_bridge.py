"""The proxy's WebSocket-to-TCP bridge (what a shell's SSH connection rides on): messages'
payloads reach the TCP peer, its bytes come back as binary messages, pings are answered, and
a close ends the TCP side too. The client side is det's own tunnel framing."""

from __future__ import annotations

import socket
import threading

from det.cli.tunnel import _frame
from det.master.ws_bridge import bridge, frame


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "closed early"
        out += chunk
    return out


def test_bytes_cross_both_ways_and_a_close_ends_the_tcp_side() -> None:
    user, master_side = socket.socketpair()
    master_up, service = socket.socketpair()
    for s in (user, service):
        s.settimeout(10)
    t = threading.Thread(target=bridge, args=(master_side, master_up, _frame(2, b"early")))
    t.start()
    assert recv_exactly(service, 5) == b"early"  # bytes read with the handshake
    user.sendall(_frame(2, b"x" * 70000))  # a 64-bit length, masked
    assert recv_exactly(service, 70000) == b"x" * 70000
    service.sendall(b"world")
    assert recv_exactly(user, 7) == frame(2, b"world") == b"\x82\x05world"
    user.sendall(_frame(9, b"p"))
    assert recv_exactly(user, 3) == b"\x8a\x01p"  # pong
    user.sendall(_frame(8, b"\x03\xe8"))
    assert recv_exactly(user, 4)[:2] == b"\x88\x02"  # the close is answered
    assert service.recv(10) == b""  # and the TCP peer sees the end
    service.close()
    t.join(10)
    assert not t.is_alive()
    for s in (user, master_side, master_up):
        s.close()


def test_a_time_limit_closes_the_websocket_as_going_away_and_ends_the_tcp_side() -> None:
    user, master_side = socket.socketpair()
    master_up, service = socket.socketpair()
    for s in (user, service):
        s.settimeout(10)
    t = threading.Thread(target=bridge, args=(master_side, master_up), kwargs={"seconds": 0.5})
    t.start()
    service.sendall(b"hi")
    assert recv_exactly(user, 4) == frame(2, b"hi")
    head = recv_exactly(user, 2)  # then, at the limit, a close frame: 1001 and a reason
    assert head[0] == 0x88
    payload = recv_exactly(user, head[1])
    assert payload[:2] == (1001).to_bytes(2, "big") and b"time limit" in payload
    assert service.recv(10) == b""  # the TCP peer sees the end
    user.sendall(_frame(8, b"\x03\xe9"))  # the client answers the close: nothing more is sent
    t.join(10)
    assert not t.is_alive()
    master_side.close()  # the proxy closes the client's socket after the bridge
    assert user.recv(10) == b""  # no frame came after the close
    for s in (user, service, master_up):
        s.close()
