"""A stand-in for the master's task-facing v1 REST endpoints (stdlib HTTP server).

Only until the real master fixture exists: the tests use it through ``master`` (url,
``task_env()``, ``requests_to(path_suffix)``), which a live-master fixture can provide too.
It records every request, checks the allocation token, long-polls preemption, and can be
stopped and restarted on the same port to simulate a master restart.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.fakes.local_http import TestHTTPServer

TOKEN = "alloc-token"


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class FakeMasterState:
    records: list[Recorded] = field(default_factory=list)
    preempt: bool = False
    best_validation: float | None = None
    checkpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    fail_status: dict[str, int] = field(default_factory=dict)  # path regex → status
    delay: dict[str, float] = field(default_factory=dict)  # path regex → seconds before replying
    # path regex → an event the reply waits for (the test sets it): a request held in flight
    # for as long as the test needs, whatever the machine's load.
    hold: dict[str, threading.Event] = field(default_factory=dict)
    cond: threading.Condition = field(default_factory=threading.Condition)


class _Handler(BaseHTTPRequestHandler):
    state: FakeMasterState

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        rec = Recorded(method, url.path, parse_qs(url.query), dict(self.headers), body)
        st = self.state
        with st.cond:
            st.records.append(rec)
            st.cond.notify_all()
        if self.headers.get("Grpc-Metadata-x-allocation-token") != f"Bearer {TOKEN}":
            return self._reply(401, {"error": "unauthenticated"})
        for pattern, seconds in st.delay.items():
            if re.search(pattern, url.path):
                time.sleep(seconds)
        for pattern, gate in st.hold.items():
            if re.search(pattern, url.path):
                gate.wait(timeout=120)
        for pattern, status in st.fail_status.items():
            if re.search(pattern, url.path):
                return self._reply(status, {"error": "injected"})
        p = url.path
        if method == "GET" and re.fullmatch(r"/api/v1/allocations/[^/]+/signals/preemption", p):
            timeout = float(rec.query.get("timeout_seconds", ["0"])[0])
            with st.cond:
                st.cond.wait_for(lambda: st.preempt, timeout=timeout)
                return self._reply(200, {"preempt": st.preempt})
        if method == "GET" and p.endswith("/searcher/best_searcher_validation_metric"):
            if st.best_validation is None:
                return self._reply(404, {"error": "no validations"})
            return self._reply(200, {"metric": st.best_validation})
        if method == "POST" and p == "/api/v1/checkpoints":
            st.checkpoints[body["uuid"]] = body
            return self._reply(200, {})
        m = re.fullmatch(r"/api/v1/checkpoints/([^/]+)", p)
        if method == "GET" and m:
            ck = st.checkpoints.get(m.group(1))
            return self._reply(404, {}) if ck is None else self._reply(200, {"checkpoint": ck})
        if method == "POST" and p == "/api/v1/runs/start":
            return self._reply(200, {"storageId": 7})
        return self._reply(200, {})

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FakeMaster:
    def __init__(self) -> None:
        self.state = FakeMasterState()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: TestHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        handler = type("Handler", (_Handler,), {"state": self.state})
        self._server = TestHTTPServer(("127.0.0.1", self.port), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            with self.state.cond:
                self.state.cond.notify_all()
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def set_preempt(self, value: bool = True) -> None:
        with self.state.cond:
            self.state.preempt = value
            self.state.cond.notify_all()

    def requests_to(self, suffix: str, method: str | None = None) -> list[Recorded]:
        with self.state.cond:
            return [
                r
                for r in self.state.records
                if r.path.endswith(suffix) and (method is None or r.method == method)
            ]

    def metric_reports(self, trial_id: int) -> list[dict[str, Any]]:
        """Every metric report the trial sent, in order, out of its batched requests."""
        return [
            report
            for r in self.requests_to(f"/api/v1/trials/{trial_id}/metrics/batch", "POST")
            for report in r.body["reports"]
        ]

    def wait_for(self, suffix: str, count: int = 1, timeout: float = 10.0) -> list[Recorded]:
        with self.state.cond:
            self.state.cond.wait_for(
                lambda: len([r for r in self.state.records if r.path.endswith(suffix)]) >= count,
                timeout=timeout,
            )
        return self.requests_to(suffix)

    def task_env(self, **overrides: Any) -> dict[str, str]:
        config = overrides.pop("config", {})
        env = {
            "DET_MASTER": self.url,
            "DET_CLUSTER_ID": "cluster-1",
            "DET_AGENT_ID": "agent-1",
            "DET_SLOT_IDS": json.dumps(["0"]),
            "DET_TASK_ID": "3.1",
            "DET_ALLOCATION_ID": "3.1.1",
            "DET_SESSION_TOKEN": TOKEN,
            "DET_TASK_TYPE": "TRIAL",
            "DET_EXPERIMENT_ID": "3",
            "DET_TRIAL_ID": "11",
            "DET_TRIAL_RUN_ID": "2",
            "DET_TRIAL_SEED": "42",
            "DET_HPARAMS": json.dumps({"lr": 0.1}),
            "DET_EXPERIMENT_CONFIG": json.dumps(config),
            "DET_STEPS_COMPLETED": "0",
            "DET_USER": "determined",
        }
        env.update({k: str(v) for k, v in overrides.items()})
        return env
