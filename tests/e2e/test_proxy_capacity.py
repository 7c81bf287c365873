"""The proxy's capacity is shared fairly (issue 23, finding 5): one user holding hundreds of
slow requests open to their own notebook fills only that notebook's share (429 with
``Retry-After`` past it) while another user's notebook, and the same user's other one, answer
at once. Before the per-user and per-task caps, 256 such requests filled the process's one cap
and every user's ``/proxy/`` request got 503."""

from __future__ import annotations

import select
import socket
import time
from urllib.parse import urlparse

import pytest

from tests.e2e.cluster import Cluster, plain, unique, wait_for

pytestmark = pytest.mark.e2e

#: A task's service that answers its task id, after 90 s for ``…/slow``.
SERVER = r"""
import http.server, os, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.endswith("/slow"):
            time.sleep(90)
        body = os.environ["DET_TASK_ID"].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
class S(http.server.ThreadingHTTPServer):
    request_queue_size = 1024
S(("0.0.0.0", int(os.environ["DET_TASK_PORT"])), H).serve_forever()
"""

FLOOD = 260  # more than the old process-wide cap (256)
PER_TASK = 64  # the default proxy.max_connections_per_task


def user(c: Cluster, name: str) -> str:
    """A token of a new user named after ``name`` (a name of its own on a shared cluster)."""
    name = unique(name)
    c.master.post(
        "/api/v1/users", {"user": {"username": name, "admin": False}, "password": "Pw-12345678"}
    )
    return c.master.login(name, "Pw-12345678")


def served_notebook(c: Cluster, token: str) -> str:
    body = {"config": {"entrypoint": ["python3", "-c", SERVER], "resources": {"slots": 0}}}
    r = c.master.session(token).post(f"{c.master.url}/api/v1/notebooks", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return str(r.json()["notebook"]["id"])


def ready(c: Cluster, nid: str) -> None:
    wait_for(
        lambda: c.master.get(f"/api/v1/tasks/{nid}")["task"]["allocations"][0].get("isReady"),
        180,
        f"task {nid} to serve",
    )


def test_one_users_flood_of_their_own_notebook_leaves_others_served(
    shared_one_slot: Cluster,
) -> None:
    c = shared_one_slot
    alice, bob = user(c, "alice"), user(c, "bob")
    flooded, alices_other, bobs = (
        served_notebook(c, alice),
        served_notebook(c, alice),
        served_notebook(c, bob),
    )
    for nid in (flooded, alices_other, bobs):
        ready(c, nid)
    url = urlparse(c.master.url)
    addr = (url.hostname or "127.0.0.1", int(url.port or 80))
    head = (
        f"GET /proxy/{flooded}/slow HTTP/1.1\r\nHost: {url.netloc}\r\n"
        f"Authorization: Bearer {alice}\r\n\r\n"
    ).encode()
    flood: list[socket.socket] = []
    answers: dict[socket.socket, bytes] = {}
    try:
        for _ in range(FLOOD):
            s = socket.create_connection(addr, timeout=30)
            s.sendall(head)
            flood.append(s)

        # Every connection past the notebook's share is answered at once; its share waits.
        def refused() -> list[bytes]:
            return [a for a in answers.values() if a.startswith(b"HTTP/1.1 429 ")]

        deadline = time.monotonic() + 120
        while len(refused()) < FLOOD - PER_TASK and time.monotonic() < deadline:
            waiting = [s for s in flood if s not in answers]
            readable, _, _ = select.select(waiting, [], [], 1.0)
            for s in readable:
                answers[s] = s.recv(4096)
        statuses = sorted({a.split(b"\r\n", 1)[0].decode() for a in answers.values()})
        assert len(refused()) == FLOOD - PER_TASK, (len(refused()), statuses)
        sample = refused()[0].decode()
        assert "Retry-After: 2" in sample and "max_connections_per_task: 64" in sample, sample

        # While alice's share is held: bob's notebook and alice's other one answer at once.
        for token, nid in ((bob, bobs), (alice, alices_other)):
            r = plain().get(
                f"{c.master.url}/proxy/{nid}/", headers={"Authorization": f"Bearer {token}"},
                timeout=30,
            )  # fmt: skip
            assert r.status_code == 200 and r.text == nid, (r.status_code, r.text[:300])
    finally:
        for s in flood:
            s.close()
