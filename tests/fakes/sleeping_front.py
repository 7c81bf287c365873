"""A scripted HTTP front for the clients' wake path (det.common.api.wake_retry): each request
gets the next scripted answer (status, content type, body), the last one repeated; it records
the methods and paths it saw. A platform's 503 is ``PLATFORM_503`` (an HTML page, as an ALB or
Cloud Run's front end answers), the master's own is ``MASTER_503`` (JSON)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Answer = tuple[int, str, bytes]

PLATFORM_503: Answer = (
    503,
    "text/html",
    b"<html><body>503 Service Temporarily Unavailable</body></html>",
)
PLATFORM_502: Answer = (502, "text/html", b"<html><body>502 Bad Gateway</body></html>")
MASTER_503: Answer = (
    503,
    "application/json",
    b'{"error": {"code": "unavailable"}, "message": "the database is resuming"}',
)
OK: Answer = (200, "application/json", b'{"clusterId": "c1", "version": "0.1.0"}')


class SleepingFront:
    def __init__(self, answers: list[Answer]) -> None:
        self.answers = list(answers)
        self.seen: list[tuple[str, str]] = []
        front = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                front.seen.append((self.command, self.path))
                status, kind, body = (
                    front.answers.pop(0) if len(front.answers) > 1 else front.answers[0]
                )
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()


@contextmanager
def sleeping_front(answers: list[Answer]) -> Iterator[SleepingFront]:
    front = SleepingFront(answers)
    try:
        yield front
    finally:
        front.close()
