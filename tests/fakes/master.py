"""A small fake of the master's side of the agent protocol (docs/internals.md), for agent tests.

This fakes *our own* interface (heartbeat, task context, task logs), not a third-party service:
a stdlib HTTP server that records what agents send and answers with a desired state the test
sets. `down = True` makes it drop every connection without answering (an unreachable master).
"""

from __future__ import annotations

import base64
import io
import json
import tarfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any, TypeVar

from tests import stall_clock
from tests.fakes.local_http import TestHTTPServer

T = TypeVar("T")


def make_tgz(files: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class FakeMaster:
    def __init__(self, token: str = "agent-secret", heartbeat_seconds: float = 0.2) -> None:
        self.token = token
        self.heartbeat_seconds = heartbeat_seconds
        #: The ``agentTimeoutSeconds`` its answers announce (None: not announced, as an older
        #: master; the agent then never fences).
        self.agent_timeout_seconds: float | None = None
        #: The ``keepaliveSeconds`` its answers announce (None: not announced, as an older
        #: master; the agent then sends at every pass).
        self.keepalive_seconds: float | None = None
        self.down = False
        #: Answer this many log posts with 500 before accepting again.
        self.fail_log_posts = 0
        self.lock = threading.Condition()
        self.desired: dict[str, list[dict[str, Any]]] = {}
        self.heartbeats: dict[str, list[tuple[float, dict[str, Any]]]] = {}
        self.contexts: dict[str, bytes] = {}
        #: While cleared, context downloads wait for it (a copy held mid-way); counted when asked.
        self.context_gate = threading.Event()
        self.context_gate.set()
        self.context_requests = 0
        self.logs: list[dict[str, Any]] = []
        #: Log posts stored (each holds a batch of ``logs``).
        self.log_posts = 0
        self.rejected_auth = 0
        #: When each allocation was first sent to an agent in a heartbeat answer (monotonic).
        self.first_sent: dict[str, float] = {}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                if self.headers.get("Authorization") == f"Bearer {fake.token}":
                    return True
                with fake.lock:
                    fake.rejected_auth += 1
                self._reply(401, {"error": "bad agent token"})
                return False

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length) or b"{}")

            def do_POST(self) -> None:
                if fake.down:
                    self.close_connection = True
                    return
                if not self._authorized():
                    return
                parts = self.path.split("/")
                if self.path.startswith("/api/v1/agents/") and parts[-1] == "heartbeat":
                    self._reply(200, fake._heartbeat(parts[4], self._body()))
                elif self.path == "/api/v1/task/logs":
                    body = self._body()
                    with fake.lock:
                        if fake.fail_log_posts > 0:
                            fake.fail_log_posts -= 1
                            self._reply(500, {"error": "injected failure"})
                            return
                        fake.logs.extend(body["logs"])
                        fake.log_posts += 1
                        fake.lock.notify_all()
                    self._reply(200, {})
                else:
                    self._reply(404, {"error": "not found"})

            def do_GET(self) -> None:
                if fake.down:
                    self.close_connection = True
                    return
                if not self._authorized():
                    return
                with fake.lock:
                    tgz = fake.contexts.get(self.path)
                    fake.context_requests += 1
                    fake.lock.notify_all()
                try:
                    if tgz is None:
                        self._reply(404, {"error": "no such context"})
                    elif not fake.context_gate.is_set():
                        self._held_reply({"b64Tgz": base64.b64encode(tgz).decode()})
                    else:
                        self._reply(200, {"b64Tgz": base64.b64encode(tgz).decode()})
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the agent gave up or was killed while the download was held

            def _held_reply(self, body: Any) -> None:
                """The answer's head at once, then a space (JSON allows leading white space)
                every 0.5 s until the gate opens, so the client's read timeout never fires;
                no Content-Length: the body ends when the connection closes (HTTP/1.0)."""
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                deadline = time.monotonic() + 120
                while not fake.context_gate.wait(0.5) and time.monotonic() < deadline:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                self.wfile.write(json.dumps(body).encode())
                self.close_connection = True

        self.server = TestHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FakeMaster:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _heartbeat(self, agent_id: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            now = time.monotonic()
            self.heartbeats.setdefault(agent_id, []).append((now, body))
            for item in self.desired.get(agent_id, []):
                self.first_sent.setdefault(item["allocationId"], now)
            self.lock.notify_all()
            answer: dict[str, Any] = {
                "clusterId": "fake-cluster",
                "enabled": True,
                "draining": False,
                "heartbeatSeconds": self.heartbeat_seconds,
                "containers": list(self.desired.get(agent_id, [])),
            }
            if self.agent_timeout_seconds is not None:
                answer["agentTimeoutSeconds"] = self.agent_timeout_seconds
            if self.keepalive_seconds is not None:
                answer["keepaliveSeconds"] = self.keepalive_seconds
            return answer

    # ---- test helpers ----

    def run(self, agent_id: str, allocation_id: str, spec: dict[str, Any]) -> None:
        self._set(
            agent_id, allocation_id, {"allocationId": allocation_id, "action": "RUN", "spec": spec}
        )

    def kill(self, agent_id: str, allocation_id: str) -> None:
        self._set(agent_id, allocation_id, {"allocationId": allocation_id, "action": "KILL"})

    def drop(self, agent_id: str, allocation_id: str) -> None:
        self._set(agent_id, allocation_id, None)

    def _set(self, agent_id: str, allocation_id: str, item: dict[str, Any] | None) -> None:
        with self.lock:
            items = [
                c for c in self.desired.get(agent_id, []) if c["allocationId"] != allocation_id
            ]
            self.desired[agent_id] = items + ([item] if item else [])

    def report(self, agent_id: str, allocation_id: str) -> dict[str, Any] | None:
        """The agent's latest report for an allocation (None if its last heartbeat lacks it)."""
        with self.lock:
            beats = self.heartbeats.get(agent_id) or []
            if not beats:
                return None
            for c in beats[-1][1]["containers"]:
                if c["allocationId"] == allocation_id:
                    return dict(c)
            return None

    def states_seen(self, agent_id: str, allocation_id: str) -> list[str]:
        with self.lock:
            seen: list[str] = []
            for _, body in self.heartbeats.get(agent_id, []):
                for c in body["containers"]:
                    if c["allocationId"] == allocation_id and (not seen or seen[-1] != c["state"]):
                        seen.append(c["state"])
            return seen

    def first_report(self, agent_id: str, allocation_id: str, state: str) -> float | None:
        """When the agent first reported `state` for the allocation (monotonic), if it has."""
        with self.lock:
            for at, body in self.heartbeats.get(agent_id, []):
                for c in body["containers"]:
                    if c["allocationId"] == allocation_id and c["state"] == state:
                        return at
            return None

    def log_lines(self, allocation_id: str) -> list[str]:
        with self.lock:
            return [entry["log"] for entry in self.logs if entry["allocationId"] == allocation_id]

    def wait_for(self, what: Callable[[], T | None], timeout: float = 30.0, desc: str = "") -> T:
        """Poll `what` (under no lock) until it returns a truthy value or `timeout` passes."""
        deadline = stall_clock.now() + timeout
        while True:
            value = what()
            if value:
                return value
            if stall_clock.now() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {desc or what}")
            with self.lock:
                self.lock.wait(0.1)
