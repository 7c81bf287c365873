"""A fake GCE metadata server (``metadata.google.internal``) for agents and the bootstrap.

Serves under ``/computeMetadata/v1/`` (403 without ``Metadata-Flavor: Google``, like the real
one): ``instance/preempted`` (``FALSE`` until :meth:`FakeGceMetadata.trigger_preemption`),
``instance/name``, ``instance/id``, ``instance/zone`` (``projects/NUM/zones/Z``),
``instance/hostname``, ``instance/network-interfaces/0/ip`` (and ``…/access-configs/0/external-ip``), ``instance/attributes/KEY`` (the
VM's metadata items, e.g. ``startup-script``), ``project/project-id``.

``?wait_for_change=true`` hangs until the value's ETag differs from ``last_etag`` (or, without
``last_etag``, until the next change), for at most ``timeout_sec``, as the real server does.
:meth:`FakeGceMetadata.fail_next` answers 503 to the next requests (the real server's "retry").
"""

from __future__ import annotations

import hashlib
import http.server
import socket
import threading
import urllib.parse
from typing import Any

from tests.fakes.local_http import LocalHttpFake

PREFIX = "/computeMetadata/v1/"


class FakeGceMetadata(LocalHttpFake):
    def __init__(
        self,
        *,
        instance_name: str = "det-agent-test0001",
        project: str = "test-project",
        zone: str = "us-west1-b",
        ip: str = "10.0.0.2",
        external_ip: str = "203.0.113.7",
        attributes: dict[str, str] | None = None,
    ) -> None:
        self.values: dict[str, str] = {
            "instance/preempted": "FALSE",
            "instance/name": instance_name,
            "instance/id": "4242424242",
            "instance/zone": f"projects/123456789/zones/{zone}",
            "instance/hostname": f"{instance_name}.{zone}.c.{project}.internal",
            "instance/network-interfaces/0/ip": ip,
            "instance/network-interfaces/0/access-configs/0/external-ip": external_ip,
            "project/project-id": project,
        }
        for key, value in (attributes or {}).items():
            self.values[f"instance/attributes/{key}"] = value
        self.requests: list[str] = []
        self._failures = 0
        self._stopping = False
        self._changed = threading.Condition()

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        fake = self

        class Handler(_Handler):
            metadata = fake

        return Handler

    def stop(self) -> None:
        with self._changed:  # release requests waiting for a change
            self._stopping = True
            self._changed.notify_all()
        super().stop()

    def set(self, key: str, value: str) -> None:
        with self._changed:
            self.values[key] = value
            self._changed.notify_all()

    def trigger_preemption(self) -> None:
        self.set("instance/preempted", "TRUE")

    def fail_next(self, count: int = 1) -> None:
        with self._changed:
            self._failures += count

    @staticmethod
    def etag(value: str) -> str:
        return hashlib.sha256(value.encode()).hexdigest()[:16]

    def answer(self, path: str, query: dict[str, str], flavor: str | None) -> tuple[int, str, str]:
        """(status, body, etag) for one request; may block for wait_for_change."""
        with self._changed:
            self.requests.append(path + ("?" + urllib.parse.urlencode(query) if query else ""))
            if flavor != "Google":
                return 403, "Missing Metadata-Flavor:Google header.", ""
            if self._failures > 0:
                self._failures -= 1
                return 503, "Service Unavailable", ""
            key = path.removeprefix(PREFIX).strip("/")
            if key not in self.values:
                return 404, "Not Found", ""
            if query.get("wait_for_change") == "true":
                seen = query.get("last_etag") or self.etag(self.values[key])
                timeout = float(query.get("timeout_sec", "60"))
                self._changed.wait_for(
                    lambda: self.etag(self.values.get(key, "")) != seen or self._stopping,
                    timeout=timeout,
                )
            value = self.values[key]
            return 200, value, self.etag(value)


class _Handler(http.server.BaseHTTPRequestHandler):
    metadata: FakeGceMetadata
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        status, body, etag = self.metadata.answer(
            url.path, query, self.headers.get("Metadata-Flavor")
        )
        data = body.encode()
        self.send_response(status)
        self.send_header("Metadata-Flavor", "Google")
        # As the real server: JSON documents (service accounts, ?recursive=true) as JSON, which
        # google-auth needs to parse them.
        json_body = body.startswith(("{", "["))
        self.send_header("Content-Type", "application/json" if json_body else "application/text")
        if etag:
            self.send_header("ETag", etag)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass
