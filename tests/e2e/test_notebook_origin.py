"""A notebook accepts writes and WebSockets only from its own pages (issue 23, finding 6).
The proxy adds the master's token to what it forwards, so Jupyter skips its own XSRF and
Origin checks; a page of the same site (another port of the master's host) could send the
notebook's cookie with a form or open a kernel's WebSocket. The proxy refuses those itself:
checked with plain requests carrying the task cookie on the notebook's own origin, and with
Chromium, which holds the cookie the ticket link gave it there and opens a page on another port
that submits a form to the notebook's contents API and opens its kernel's WebSocket."""

from __future__ import annotations

import http.server
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from det.cli.notebooks import with_path
from tests.e2e.cluster import Cluster, plain, wait_for
from tests.e2e.ws import WebSocket
from tests.fakes.local_http import TestHTTPServer
from tests.integration.conftest import free_port
from tests.integration.webui_support import browser, page

pytestmark = pytest.mark.e2e
__all__ = ["browser", "page"]


def names(c: Cluster, base: str) -> set[str]:
    r = plain().get(
        f"{base}api/contents", headers={"Authorization": f"Bearer {c.master.token}"}, timeout=30
    )
    assert r.status_code == 200, r.text
    return {str(f["name"]) for f in r.json()["content"]}


@pytest.fixture
def other_origin() -> Iterator[tuple[str, dict[str, str]]]:
    """A web server on another port of the same host (another origin, the same site): the
    pages it serves are set in the dict by path."""
    pages: dict[str, str] = {}

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, "").encode()
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: Any) -> None:
            pass

    server = TestHTTPServer(("127.0.0.1", free_port()), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", pages
    server.shutdown()
    server.server_close()


@pytest.mark.browser
def test_a_page_of_another_origin_cannot_write_to_a_notebook(
    shared_one_slot: Cluster, page: Any, other_origin: tuple[str, dict[str, str]]
) -> None:
    c = shared_one_slot
    nid = c.master.post("/api/v1/notebooks", {})["notebook"]["id"]
    wait_for(
        lambda: c.master.get(f"/api/v1/tasks/{nid}")["task"]["allocations"][0].get("isReady"),
        180,
        "the notebook to be ready",
    )
    base = f"{c.master.url}/proxy/{nid}/"
    auth = {"Authorization": f"Bearer {c.master.token}"}
    kernel = plain().post(f"{base}api/kernels", json={"name": "python3"}, headers=auth, timeout=60)
    assert kernel.status_code == 201, kernel.text
    channels = f"{base}api/kernels/{kernel.json()['id']}/channels".replace("http", "ws", 1)
    before = names(c, base)

    # Requests carrying only the task's cookie (what a browser sends), as the finding's probe,
    # on the notebook's own origin (<id>.localhost at the master's task port: to 127.0.0.1 with
    # that Host).
    browser_like = plain()
    opened = c.master.post("/api/v1/proxy_tickets", {"taskId": nid})["url"]
    task_host = urllib.parse.urlsplit(opened).netloc
    own_origin = f"http://{task_host}"
    browser_like.headers["Host"] = task_host
    local = f"http://127.0.0.1:{urllib.parse.urlsplit(opened).port}/proxy/{nid}/"
    hop = browser_like.get(
        with_path(opened, "lab").replace(f"{own_origin}/proxy/{nid}/", local),
        allow_redirects=False,
        timeout=30,
    )
    assert hop.status_code == 302, hop.text
    task_channels = channels.replace(f"{c.master.url}/proxy/".replace("http", "ws", 1), "")
    task_channels = f"ws://{task_host}/proxy/{task_channels}"
    evil = browser_like.post(
        f"{local}api/contents", headers={"Origin": "http://evil.example"}, timeout=30
    )
    assert evil.status_code == 403, evil.text
    assert "cross-origin request refused" in evil.json()["message"]
    same_site = browser_like.post(
        f"{local}api/contents", headers={"Sec-Fetch-Site": "same-site"}, timeout=30
    )
    assert same_site.status_code == 403, same_site.text
    assert names(c, base) == before
    cookie = "; ".join(f"{k}={v}" for k, v in browser_like.cookies.items())
    ws = WebSocket(task_channels, {"Cookie": cookie, "Origin": "http://evil.example"})
    assert ws.status == 403, ws.head
    ws.close()
    # The notebook's own pages still write and open WebSockets.
    own = browser_like.post(f"{local}api/contents", headers={"Origin": own_origin}, timeout=30)
    assert own.status_code == 201, own.text
    created = own.json()["path"]
    ws = WebSocket(task_channels, {"Cookie": cookie, "Origin": own_origin})
    assert ws.status == 101, ws.head
    ws.close()
    gone = plain().delete(f"{base}api/contents/{created}", headers=auth, timeout=30)
    assert gone.status_code == 204, gone.text

    # Chromium: the ticket link gives it the notebook's cookie; then a page on another port.
    attacker, pages = other_origin
    pages["/ws"] = (
        "<html><body><script>"
        f"const ws = new WebSocket({task_channels!r});"
        "ws.onopen = () => { document.title = 'ws-open'; ws.close(); };"
        "ws.onerror = () => { document.title = 'ws-refused'; };"
        "</script></body></html>"
    )
    pages["/form"] = (
        "<html><body>"
        f'<form id="f" method="POST" action="{own_origin}/proxy/{nid}/api/contents"'
        ' enctype="text/plain"></form>'
        "<script>document.getElementById('f').submit();</script></body></html>"
    )
    fresh = c.master.post("/api/v1/proxy_tickets", {"taskId": nid})["url"]
    page.goto(with_path(fresh, "lab"), wait_until="commit")
    assert any(k["name"] == "det_task" for k in page.context.cookies())
    page.goto(f"{attacker}/ws")
    page.wait_for_function("document.title.startsWith('ws-')", timeout=60_000)
    assert page.title() == "ws-refused"
    page.goto(f"{attacker}/form")
    page.wait_for_url(f"**/proxy/{nid}/api/contents", timeout=60_000)
    assert "cross-origin request refused" in page.content()
    assert names(c, base) == before
    c.master.post(f"/api/v1/notebooks/{nid}/kill")
