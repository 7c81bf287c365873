"""Fakes of the two Google APIs a GCP master's boot calls with its service account's token:
Secret Manager (``GET /v1/projects/P/secrets/S/versions/latest:access``, the boot script's
``DET_SECRETMANAGER_ENDPOINT``) and Cloud Logging (``POST /v2/entries:write``, the log
shipper's ``DET_LOGGING_ENDPOINT``; ``POST /v2/entries:list``, what ``det deploy gcp status``
reads). Both answer 401 without ``Authorization: Bearer TOKEN``.
"""

from __future__ import annotations

import base64
import http.server
import json
import re
import socket
import threading
from typing import Any

from tests.fakes.local_http import LocalHttpFake


def filter_matches(entry: dict[str, Any], filter_: str) -> bool:
    """Cloud Logging's filter, as far as status uses it: terms joined by ``AND``,
    ``logName="L"``, ``labels.K="V"`` (equal) and ``labels.K:"V"`` (has: a substring)."""
    for term in filter_.split(" AND "):
        m = re.fullmatch(r'(logName|labels\.(\w+))(=|:)"([^"]*)"', term.strip())
        assert m, f"the fake does not know the filter term {term!r}"
        value = entry.get("logName") if m[2] is None else (entry.get("labels") or {}).get(m[2])
        if value is None or (value != m[4] if m[3] == "=" else m[4] not in value):
            return False
    return True


def list_entries(entries: list[dict[str, Any]], doc: dict[str, Any]) -> list[dict[str, Any]]:
    """``entries:list``'s answer to ``doc``: the matching entries in ``orderBy`` order, at most
    ``pageSize`` (50 by default) of them."""
    found = sorted(
        (e for e in entries if filter_matches(e, doc["filter"])),
        key=lambda e: str(e.get("timestamp")),
        reverse=doc.get("orderBy") == "timestamp desc",
    )
    return found[: int(doc.get("pageSize", 50))]


class FakeGoogleApis(LocalHttpFake):
    def __init__(self, token: str) -> None:
        self.token = token
        self.secrets: dict[str, str] = {}
        """Secret resource path (``projects/P/secrets/S``) → its latest version's text."""
        self.log_entries: list[dict[str, Any]] = []
        self.requests: list[str] = []
        self.lock = threading.Lock()

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        return _Handler

    def logged_text(self) -> str:
        with self.lock:
            return "\n".join(str(e.get("textPayload", "")) for e in self.log_entries)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Any
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, doc: dict[str, Any]) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        fake: FakeGoogleApis = self.server.fake
        with fake.lock:
            fake.requests.append(f"{self.command} {self.path}")
        if self.headers.get("Authorization") != f"Bearer {fake.token}":
            self._send(401, {"error": {"code": 401, "status": "UNAUTHENTICATED"}})
            return False
        return True

    def do_GET(self) -> None:
        fake: FakeGoogleApis = self.server.fake
        if not self._authorized():
            return
        path = self.path.split("?", 1)[0]
        suffix = "/versions/latest:access"
        if path.startswith("/v1/") and path.endswith(suffix):
            secret = path.removeprefix("/v1/").removesuffix(suffix)
            with fake.lock:
                text = fake.secrets.get(secret)
            if text is None:
                self._send(404, {"error": {"code": 404, "status": "NOT_FOUND"}})
                return
            data = base64.b64encode(text.encode()).decode()
            self._send(200, {"name": f"{secret}/versions/1", "payload": {"data": data}})
            return
        self._send(404, {"error": {"code": 404, "status": "NOT_FOUND"}})

    def do_POST(self) -> None:
        fake: FakeGoogleApis = self.server.fake
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self._authorized():
            return
        if self.path.split("?", 1)[0] == "/v2/entries:write":
            doc = json.loads(body or b"{}")
            with fake.lock:
                # As Cloud Logging does: an entry gets the request's labels and log name.
                for entry in doc.get("entries", []):
                    labels = {**(doc.get("labels") or {}), **(entry.get("labels") or {})}
                    fake.log_entries.append(
                        {"logName": doc.get("logName"), **entry, "labels": labels}
                    )
            self._send(200, {})
            return
        if self.path.split("?", 1)[0] == "/v2/entries:list":
            doc = json.loads(body or b"{}")
            with fake.lock:
                self._send(200, {"entries": list_entries(fake.log_entries, doc)})
            return
        self._send(404, {"error": {"code": 404, "status": "NOT_FOUND"}})
