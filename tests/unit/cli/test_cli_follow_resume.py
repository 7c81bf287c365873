"""A log follow the master ended before a platform's request time limit is asked again until
its task has ended, and lines already printed are not printed twice (a local HTTP server plays a
master whose follow ends early)."""

from __future__ import annotations

import http.server
import json
from typing import Any

from det.cli.session import Session
from tests.fakes.local_http import LocalHttpFake


class EarlyEndingLogs(LocalHttpFake):
    """Each follow answers every line so far then ends; two lines are added per request."""

    def __init__(self) -> None:
        self.lines: list[int] = [1, 2]
        self.requests = 0

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake: EarlyEndingLogs = self.server.fake  # type: ignore[attr-defined]
                fake.requests += 1
                body = "".join(
                    json.dumps({"result": {"id": i, "log": f"line {i}"}}) + "\n" for i in fake.lines
                ).encode()
                fake.lines += [fake.lines[-1] + 1, fake.lines[-1] + 2]
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler


def test_a_follow_is_asked_again_until_the_task_ends_without_repeating_lines() -> None:
    with EarlyEndingLogs() as fake:
        checks = iter([False, False, True])
        got = [
            e["id"]
            for e in Session(fake.url).follow(
                "/api/v1/tasks/t/logs", {"follow": "true"}, lambda: next(checks)
            )
        ]
    assert fake.requests == 3
    assert got == [1, 2, 3, 4, 5, 6]


def test_an_ended_task_is_asked_once() -> None:
    with EarlyEndingLogs() as fake:
        got = [e["id"] for e in Session(fake.url).follow("/x", {}, lambda: True)]
    assert fake.requests == 1 and got == [1, 2]
