"""A task service on this host for the task-origin tests: a notebook row whose proxy address
is a small HTTP server here (no container), serving a page its author wrote, and recording
every request that reaches it."""

from __future__ import annotations

import base64
import hashlib
import http.client
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import psycopg

from tests.fakes.local_http import TestHTTPServer


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    phase: str


@dataclass
class FakeTask:
    """Serves ``page`` (HTML) for every GET, sets ``cookies`` with it, accepts WebSockets."""

    page: str = "<!doctype html><p>task</p>"
    cookies: list[str] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    phase: str = "setup"
    server: TestHTTPServer | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.server_address[1])

    def start(self) -> FakeTask:
        task = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _record(self) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                task.seen.append(Seen(self.path, headers, task.phase))

            def do_GET(self) -> None:
                self._record()
                key = self.headers.get("Sec-WebSocket-Key")
                if key:
                    digest = hashlib.sha1(
                        (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()
                    ).digest()
                    self.send_response(101)
                    self.send_header("Upgrade", "websocket")
                    self.send_header("Connection", "Upgrade")
                    self.send_header("Sec-WebSocket-Accept", base64.b64encode(digest).decode())
                    self.end_headers()
                    self.close_connection = True
                    return
                body = task.page.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                for c in task.cookies:
                    self.send_header("Set-Cookie", c)
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                self._record()
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                self.send_response(201)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = TestHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def serve_from(pg_url: str, task_id: str, port: int) -> None:
    """Makes the task ready at this host's ``port`` (what an agent reports for a container)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE ntsc_tasks SET proxy_address = %s WHERE id = %s",
            (f"127.0.0.1:{port}", task_id),
        )


def task_request(
    url: str, method: str = "GET", headers: dict[str, str] | None = None
) -> http.client.HTTPResponse:
    """A request to a URL on the task origin (``<task>.localhost`` names this machine, which
    browsers know and the resolver here may not): to 127.0.0.1 with the URL's ``Host``."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection("127.0.0.1", parts.port, timeout=30)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    conn.request(method, path, headers={"Host": parts.netloc, **(headers or {})})
    r = conn.getresponse()
    r.read()
    conn.close()
    return r


def cookie_pair(set_cookie: str) -> str:
    return set_cookie.split(";", 1)[0]
