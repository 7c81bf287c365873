"""A serverless master's task origin (docs/deploy.md): the config ``det deploy aws|gcp up
--master serverless`` renders (``task_origin`` a second host name, ``task_port`` the listener
the platform sends that name's requests to), served by a real master process on a real
PostgreSQL, spoken to as the platform's front would: the task origin's requests reach only
the task proxy whatever ``Host`` the front passes on, and the API's origin never serves a
task's page, whatever a client adds to its request."""

from __future__ import annotations

import base64
import http.client
import os
from collections.abc import Iterator
from typing import Any

import pytest

from det.deploy.common import serverless as sl
from tests.integration.conftest import Master, free_port
from tests.integration.task_origin_support import FakeTask, cookie_pair, serve_from

pytestmark = [pytest.mark.integration]

API = "det.example.test"
TASKS = "tasks.det.example.test"
# What an ALB's target or a VPC origin may see as Host when the front does not pass the
# browser's on: the task listener serves the task origin whatever it is.
ALB = "internal-det-c1-alb-1234567890.us-west-2.elb.amazonaws.com"


@pytest.fixture
def fake() -> Iterator[FakeTask]:
    f = FakeTask().start()
    yield f
    f.stop()


@pytest.fixture
def master(master_factory: Any, pg_url: str) -> tuple[Master, int]:
    task_port = free_port()
    vm_like = {"port": 8080, "task_port": 8081, "resource_pools": []}
    shaped = sl.serverless_master_config(vm_like, f"https://{API}", f"https://{TASKS}")
    m: Master = master_factory(
        extra={
            "master_url": shaped["master_url"],
            "task_origin": shaped["task_origin"],
            "task_port": task_port,
            "request_time_limit_seconds": 60,
        }
    )
    return m, task_port


def _raw(
    port: int, path: str, host: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers={"Host": host, **(headers or {})})
    r = conn.getresponse()
    body = r.read() if r.status != 101 else b""
    out = (r.status, {k.lower(): v for k, v in r.getheaders()}, body)
    conn.close()
    return out


def _ws(port: int, path: str, host: str, origin: str, cookie: str) -> int:
    key = base64.b64encode(os.urandom(16)).decode()
    status, _, _ = _raw(
        port,
        path,
        host,
        {
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Key": key,
            "Sec-WebSocket-Version": "13",
            "Origin": origin,
            "Cookie": cookie,
        },
    )
    return status


def _open(m: Master, pg_url: str, fake: FakeTask) -> str:
    r = m.session(m.token).post(m.url + "/api/v1/notebooks", json={"config": {}}, timeout=30)
    assert r.status_code == 200, r.text
    nid = str(r.json()["notebook"]["id"])
    serve_from(pg_url, nid, fake.port)
    return nid


def _ticket(m: Master, nid: str) -> dict[str, str]:
    r = m.session(m.token).post(m.url + "/api/v1/proxy_tickets", json={"taskId": nid}, timeout=30)
    assert r.status_code == 200, r.text
    out: dict[str, str] = r.json()
    return out


def test_the_task_origin_serves_only_the_proxy_whatever_host_the_front_passes(
    master: tuple[Master, int], pg_url: str, fake: FakeTask
) -> None:
    m, task_port = master
    nid = _open(m, pg_url, fake)
    fake.page = "<!doctype html><p id=task>the task's page</p>"
    fake.cookies = [f"own=1; Path=/proxy/{nid}/"]
    opened = _ticket(m, nid)
    assert opened["url"].startswith(f"https://{TASKS}/proxy/{nid}/?det_ticket=")
    path = opened["url"].split(TASKS, 1)[1]
    bearer = {"Authorization": f"Bearer {m.token}"}
    for host in (TASKS, ALB):
        # Nothing of the master but /proxy/<task>/ is served on the task listener.
        for other in ("/", "/det/", "/info", "/api/v1/me", "/api/v1/master"):
            status, _, body = _raw(task_port, other, host, bearer)
            assert status == 404 and b"serves only /proxy/" in body, (host, other, body)
    # The ticket opens the task once, for a cookie on this origin's own path.
    status, headers, _ = _raw(task_port, path, ALB)
    assert status == 302 and headers["location"] == f"/proxy/{nid}/", headers
    cookie = cookie_pair(headers["set-cookie"])
    assert "; Secure" in headers["set-cookie"] and f"Path=/proxy/{nid}/" in headers["set-cookie"]
    assert _raw(task_port, path, TASKS)[0] == 401  # spent
    status, headers, body = _raw(task_port, f"/proxy/{nid}/", TASKS, {"Cookie": cookie})
    assert status == 200 and b"the task's page" in body
    assert "content-security-policy" not in headers  # the page runs, on its own origin
    assert headers["set-cookie"] == f"own=1; Path=/proxy/{nid}/"
    # The task's WebSocket from its own page is let through, though the front named another
    # host (its load balancer's); one from the WebUI's origin is not.
    ws = f"/proxy/{nid}/api/kernels/k1/channels"
    assert _ws(task_port, ws, ALB, f"https://{TASKS}", cookie) == 101
    assert _ws(task_port, ws, TASKS, f"https://{TASKS}", cookie) == 101
    assert _ws(task_port, ws, ALB, f"https://{API}", cookie) == 403
    assert _ws(task_port, ws, ALB, "https://evil.example", cookie) == 403
    # On the API's port a request for the task origin's Host goes to the proxy too (an ALB
    # rule or a domain pointed at the wrong port serves no WebUI there).
    status, _, body = _raw(int(m.url.rsplit(":", 1)[1]), "/api/v1/me", TASKS, bearer)
    assert status == 404 and b"serves only /proxy/" in body


def test_the_api_origin_never_serves_a_tasks_page_whatever_a_client_adds(
    master: tuple[Master, int], pg_url: str, fake: FakeTask
) -> None:
    m, task_port = master
    api_port = int(m.url.rsplit(":", 1)[1])
    nid = _open(m, pg_url, fake)
    fake.page = "<!doctype html><p id=task>the task's page</p>"
    path = _ticket(m, nid)["url"].split(TASKS, 1)[1]
    status, headers, _ = _raw(task_port, path, TASKS)
    cookie = cookie_pair(headers["set-cookie"])
    # What a client of the API's origin may add to claim the task origin: the front header a
    # CloudFront distribution sets (the API's overwrites it), forwarded-host headers, the task
    # cookie and a fresh ticket. None makes the API's origin serve the page.
    forged = {
        "X-Det-Front": "tasks",
        "X-Forwarded-Host": TASKS,
        "Forwarded": f"host={TASKS}",
        "X-Original-Host": TASKS,
        "Cookie": cookie,
        "Sec-Fetch-Mode": "navigate",
        "Accept": "text/html",
    }
    status, headers, body = _raw(api_port, f"/proxy/{nid}/", API, forged)
    assert status == 302 and headers["location"] == f"/det/open/{nid}?path=", headers
    assert b"the task's page" not in body and "set-cookie" not in headers
    ticket = _ticket(m, nid)["url"].split("det_ticket=", 1)[1]
    status, headers, _ = _raw(api_port, f"/proxy/{nid}/?det_ticket={ticket}", API, forged)
    assert status == 302 and headers["location"].startswith(f"https://{TASKS}/proxy/{nid}/")
    assert "set-cookie" not in headers  # the ticket goes on unused, to the task origin
    # The API itself answers the API's host, forged headers or not.
    status, _, body = _raw(api_port, "/api/v1/me", API, {**forged, **_bearer(m)})
    assert status == 200 and b'"username"' in body
    # A bearer client (the CLI, the SDK) is answered here sandboxed and without cookies.
    status, headers, body = _raw(api_port, f"/proxy/{nid}/", API, {**forged, **_bearer(m)})
    assert status == 200 and headers["content-security-policy"] == "sandbox"
    assert "set-cookie" not in headers
    assert all(s.path.startswith(f"/proxy/{nid}/") for s in fake.seen)


def _bearer(m: Master) -> dict[str, str]:
    return {"Authorization": f"Bearer {m.token}"}
