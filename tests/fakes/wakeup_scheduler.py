"""A fake of the platform's scheduler for wake-ups (det.master.wakeups): it takes det's ``http``
form (``POST /``: name, at, url, method, headers) and Cloud Tasks' ``tasks.create`` form
(``POST /v2/projects/P/locations/L/queues/Q/tasks``), refuses a second of the same name with
409 (as Cloud Tasks does), and at each wake-up's time makes its HTTP call, which is what starts
a serverless master. ``asked`` lists what was scheduled, ``fired`` what each call answered."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import http.server
import json
import threading
from typing import Any

import requests

from tests.fakes.local_http import LocalHttpFake


@dataclasses.dataclass
class Asked:
    name: str
    at: dt.datetime
    url: str
    method: str
    headers: dict[str, str]
    body: bytes = b""


class FakeWakeupScheduler(LocalHttpFake):
    def __init__(self, verify: bool | str = True) -> None:
        self.verify = verify  # the CA bundle the calls trust (https wake-up URLs)
        self.asked: list[Asked] = []
        self.fired: list[tuple[str, int | str]] = []
        self._lock = threading.Lock()
        self._timers: list[threading.Timer] = []

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                fake: FakeWakeupScheduler = self.server.fake  # type: ignore[attr-defined]
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    asked = fake.parse(self.path, json.loads(raw))
                except (KeyError, ValueError) as e:
                    self._answer(400, {"error": str(e)})
                    return
                status = fake.add(asked)
                self._answer(status, {"name": asked.name})

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    @staticmethod
    def parse(path: str, body: dict[str, Any]) -> Asked:
        if path.startswith("/v2/"):  # Cloud Tasks
            task = body["task"]
            req = task["httpRequest"]
            return Asked(
                name=task["name"],
                at=_time(task["scheduleTime"]),
                url=req["url"],
                method=req.get("httpMethod", "POST"),
                headers=dict(req.get("headers") or {}),
                body=base64.b64decode(req.get("body") or ""),
            )
        return Asked(
            name=body["name"],
            at=_time(body["at"]),
            url=body["url"],
            method=body.get("method", "POST"),
            headers=dict(body.get("headers") or {}),
        )

    def add(self, asked: Asked) -> int:
        with self._lock:
            if any(a.name == asked.name for a in self.asked):
                return 409
            self.asked.append(asked)
            delay = max(0.0, (asked.at - dt.datetime.now(dt.UTC)).total_seconds())
            timer = threading.Timer(delay, self._fire, args=(asked,))
            timer.daemon = True
            self._timers.append(timer)
            timer.start()
        return 200

    def _fire(self, asked: Asked) -> None:
        try:
            r = requests.request(
                asked.method,
                asked.url,
                headers=asked.headers,
                data=asked.body or None,
                timeout=120,
                verify=self.verify,
            )
            result: int | str = r.status_code
        except requests.RequestException as e:
            result = repr(e)
        with self._lock:
            self.fired.append((asked.name, result))

    def stop(self) -> None:
        with self._lock:
            for t in self._timers:
                t.cancel()
        super().stop()


def _time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(dt.UTC)
