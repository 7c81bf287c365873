"""The tests' HTTP server class (tests/fakes/local_http.py): a client that goes away mid-answer
prints nothing on the process's stderr; a handler's own error still prints its traceback."""

from __future__ import annotations

import http.client
import http.server
import socket
import threading
from collections.abc import Iterator

import pytest

from tests.fakes.local_http import TestHTTPServer


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/broken":
            raise ValueError("a bug in the handler")
        self.send_response(200)
        self.send_header("Content-Length", str(64 << 20))
        self.end_headers()
        chunk = b"x" * (1 << 20)
        for _ in range(64):  # more than any socket buffer holds: the writes fail
            self.wfile.write(chunk)

    def log_message(self, *a: object) -> None:
        pass


class _Server(TestHTTPServer):
    """Counts the requests done with (after ``handle_error``, if the handler failed)."""

    done = threading.Semaphore(0)

    def shutdown_request(self, request: socket.socket) -> None:  # type: ignore[override]
        super().shutdown_request(request)
        self.done.release()


@pytest.fixture
def server() -> Iterator[_Server]:
    s = _Server(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield s
    s.shutdown()
    s.server_close()


def test_a_client_gone_mid_answer_prints_nothing(
    server: _Server, capsys: pytest.CaptureFixture[str]
) -> None:
    sock = socket.create_connection(server.server_address[:2])
    sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
    sock.recv(1024)
    # an RST instead of a FIN: the server's next writes fail with a reset or broken pipe
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()
    assert server.done.acquire(timeout=30)  # its handler failed and the error was handled
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=10)
    conn.request("GET", "/broken")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        conn.getresponse()
    conn.close()
    assert server.done.acquire(timeout=30)
    err = capsys.readouterr().err
    assert "ValueError: a bug in the handler" in err  # the handler's bug is shown...
    assert "BrokenPipeError" not in err and "ConnectionResetError" not in err, (
        err
    )  # ...not the client's leaving
