"""A fake cloud metadata server: EC2 IMDSv2 and the GCE metadata paths the agent reads.

EC2: ``PUT /latest/api/token`` (needs ``X-aws-ec2-metadata-token-ttl-seconds``) returns a
token; every ``GET /latest/meta-data/...`` without a valid token gets 401. ``instance-id`` is
served; ``spot/instance-action`` is 404 until :meth:`FakeImds.trigger_spot_interruption`.

GCE: ``GET /computeMetadata/v1/instance/name`` and ``.../instance/preempted`` with the
``Metadata-Flavor: Google`` header (403 without it).

Counters (``token_requests``, ``requests``) let tests check the handshake happened. Runs on a
daemon thread; Nagle is off so small responses are not delayed.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import secrets
import socket
import threading
from typing import Any

from tests.fakes.local_http import LocalHttpFake


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Any  # the fake is server.fake
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: str = "", headers: dict[str, str] | None = None) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if self.path != "/latest/api/token":
            self._send(404)
            return
        ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
        if not ttl or not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
            self._send(400, "missing or invalid X-aws-ec2-metadata-token-ttl-seconds")
            return
        with fake.lock:
            fake.token_requests += 1
            token = secrets.token_urlsafe(24)
            fake.tokens.add(token)
        self._send(200, token, {"X-aws-ec2-metadata-token-ttl-seconds": ttl})

    def do_GET(self) -> None:
        fake = self.server.fake
        with fake.lock:
            fake.requests.append(self.path)
        if self.path.startswith("/computeMetadata/"):
            self._gce()
            return
        if not self.path.startswith("/latest/meta-data/"):
            self._send(404)
            return
        token = self.headers.get("X-aws-ec2-metadata-token")
        with fake.lock:
            valid = token in fake.tokens
        if not valid:
            self._send(401)
            return
        key = self.path.removeprefix("/latest/meta-data/")
        with fake.lock:
            value = fake.metadata.get(key)
        if value is None:
            self._send(404)
        else:
            self._send(200, value)

    def _gce(self) -> None:
        fake = self.server.fake
        if self.headers.get("Metadata-Flavor") != "Google":
            self._send(403, "missing Metadata-Flavor: Google")
            return
        path = self.path.split("?", 1)[0].removeprefix("/computeMetadata/v1/")
        with fake.lock:
            value = fake.gce.get(path)
        if value is None:
            self._send(404)
        else:
            self._send(200, value, {"Metadata-Flavor": "Google"})


class FakeImds(LocalHttpFake):
    def __init__(
        self, instance_id: str = "i-0fake0000000000001", instance_name: str = "det-agent-1"
    ):
        self.lock = threading.Lock()
        self.tokens: set[str] = set()
        self.token_requests = 0
        self.requests: list[str] = []
        self.metadata: dict[str, str] = {"instance-id": instance_id}
        self.gce: dict[str, str] = {"instance/name": instance_name, "instance/preempted": "FALSE"}

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        return _Handler

    def trigger_spot_interruption(
        self, when: dt.datetime | None = None, action: str = "terminate"
    ) -> dt.datetime:
        """Publish ``spot/instance-action`` (EC2's two-minute warning); returns the time."""
        when = when or dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(minutes=2)
        body = json.dumps({"action": action, "time": when.strftime("%Y-%m-%dT%H:%M:%SZ")})
        with self.lock:
            self.metadata["spot/instance-action"] = body
            self.gce["instance/preempted"] = "TRUE"
        return when

    def revoke_tokens(self) -> None:
        """Forget every issued token (as if they expired)."""
        with self.lock:
            self.tokens.clear()
