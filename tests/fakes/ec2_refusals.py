"""A proxy in front of moto that answers chosen EC2 calls with an AWS error (moto has no error
injection): RunInstances of one instance type gets InsufficientInstanceCapacity."""

from __future__ import annotations

import http.server
import threading
import urllib.error
import urllib.request
from typing import Any

from tests.fakes.local_http import TestHTTPServer


class CapacityProxy:
    """In front of moto: RunInstances for ``instance_type`` gets EC2's capacity error while
    ``refusing`` (the other calls pass through)."""

    def __init__(self, upstream: str, instance_type: str) -> None:
        self.upstream = upstream
        self.instance_type = instance_type
        self.refused = 0
        self.refusing = True
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                text = body.decode(errors="replace")
                if (
                    proxy.refusing
                    and "Action=RunInstances" in text
                    and f"InstanceType={proxy.instance_type}" in text
                ):
                    proxy.refused += 1
                    self._answer(
                        500,
                        (
                            b'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
                            b"<Code>InsufficientInstanceCapacity</Code><Message>We currently do"
                            b" not have sufficient capacity.</Message></Error></Errors>"
                            b"<RequestID>proxy</RequestID></Response>"
                        ),
                        "text/xml",
                    )
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                req = urllib.request.Request(
                    proxy.upstream + self.path, data=body, headers=headers, method="POST"
                )
                try:
                    with urllib.request.urlopen(req, timeout=60) as resp:
                        self._answer(resp.status, resp.read(), resp.headers["Content-Type"])
                except urllib.error.HTTPError as e:
                    self._answer(e.code, e.read(), e.headers["Content-Type"])

            def _answer(self, status: int, data: bytes, ctype: str | None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype or "text/xml")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = TestHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
