"""Notebooks on a real cluster: ``det notebook start`` prints the proxied URL, JupyterLab is
served through the master's proxy to its owner only (401 without a token, 403 for another user),
a kernel started through the proxy runs code over its WebSocket, and an idle notebook is
killed after its ``idle_timeout``. The official CLI's ``notebook start --no-browser`` too."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from det.cli.notebooks import with_path
from tests.compat.official import ensure_official_venv
from tests.e2e.cluster import Cluster, plain, unique, wait_for
from tests.e2e.test_commands import det
from tests.e2e.ws import WebSocket
from tests.integration.conftest import ADMIN_PASSWORD
from tests.integration.task_origin_support import cookie_pair, task_request
from tests.integration.webui_support import browser, page

pytestmark = pytest.mark.e2e
__all__ = ["browser", "page"]


def notebook(c: Cluster, nid: str) -> dict[str, Any]:
    return dict(c.master.get(f"/api/v1/notebooks/{nid}")["notebook"])


def execute(c: Cluster, base: str, token: str, code: str) -> str:
    """Starts a kernel through the proxy, runs ``code`` over its WebSocket; its result."""
    auth = {"Authorization": f"Bearer {token}"}
    r = plain().post(f"{base}api/kernels", json={"name": "python3"}, headers=auth, timeout=60)
    assert r.status_code == 201, r.text
    kernel = r.json()["id"]
    ws = WebSocket(f"{base}api/kernels/{kernel}/channels".replace("http", "ws", 1), auth)
    assert ws.status == 101, ws.head
    msg_id = uuid.uuid4().hex
    session = uuid.uuid4().hex
    ws.send_json(
        {
            "header": {
                "msg_id": msg_id,
                "msg_type": "execute_request",
                "username": "test",
                "session": session,
                "version": "5.3",
                "date": "2026-01-01T00:00:00Z",
            },
            "parent_header": {},
            "metadata": {},
            "content": {"code": code, "silent": False, "store_history": True,
                        "user_expressions": {}, "allow_stdin": False},
            "channel": "shell",
            "buffers": [],
        }
    )  # fmt: skip
    try:
        while True:
            m = ws.recv_json()
            if m.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if m["msg_type"] == "execute_result":
                return str(m["content"]["data"]["text/plain"])
            if m["msg_type"] == "error":
                raise AssertionError(m["content"])
    finally:
        ws.close()


def test_notebook_through_the_proxy(shared_one_slot: Cluster) -> None:
    c = shared_one_slot
    r = det(c, "notebook", "start", "--no-browser")
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{c.dump()}"
    m = re.search(r"(http://\S+/proxy/([0-9a-f-]{36})/)lab", r.stdout)
    assert m, r.stdout
    base, nid = m.group(1), m.group(2)
    assert notebook(c, nid)["state"] == "STATE_RUNNING"
    token = c.master.token

    page = plain().get(f"{base}lab", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert page.status_code == 200 and "JupyterLab" in page.text, page.text[:300]
    page = plain().get(f"{base}api/status", headers={"Authorization": f"Bearer {token}"})
    assert page.status_code == 200 and "last_activity" in page.json()
    # Determined's WebUI cookie is no session here (a task's page could have planted it).
    assert plain().get(f"{base}api/status", cookies={"auth": token}).status_code == 401

    assert plain().get(f"{base}lab", timeout=30).status_code == 401
    assert plain().get(f"{base}lab", headers={"Authorization": "Bearer nope"}).status_code == 401
    other_name = unique("other")
    c.master.post(
        "/api/v1/users",
        {"user": {"username": other_name, "admin": False}, "password": "Other-pw-1"},
    )
    other = c.master.login(other_name, "Other-pw-1")
    denied = plain().get(f"{base}lab", headers={"Authorization": f"Bearer {other}"}, timeout=30)
    assert denied.status_code == 403, denied.text
    assert "belongs to admin" in denied.json()["message"]
    ws = WebSocket(
        f"{base}api/kernels".replace("http", "ws", 1), {"Authorization": f"Bearer {other}"}
    )
    assert ws.status == 403
    ws.close()

    assert execute(c, base, token, "6*7") == "42"

    # A browser: the ticket opens the notebook once, on the tasks' own origin, and becomes a
    # cookie for this notebook only.
    opened = c.master.post("/api/v1/proxy_tickets", {"taskId": nid})
    ticket, url = opened["ticket"], opened["url"]
    assert url.startswith(f"http://{nid}.localhost:"), url
    hop = task_request(with_path(url, "lab"))
    assert hop.status == 302 and hop.getheader("Location") == f"/proxy/{nid}/lab"
    set_cookie = hop.getheader("Set-Cookie") or ""
    assert "HttpOnly" in set_cookie and f"Path=/proxy/{nid}/" in set_cookie, set_cookie
    task_base = url.split("?")[0]
    page = task_request(f"{task_base}lab", headers={"Cookie": cookie_pair(set_cookie)})
    assert page.status == 200
    assert task_request(with_path(url, "lab")).status == 401  # used
    forged = task_request(f"{task_base}lab?det_ticket={ticket[:-2]}xx")
    assert forged.status == 401
    assert task_request(f"{task_base}lab", headers={"Cookie": f"det_task={ticket}"}).status == 401
    theirs = c.master.session(other).post(
        f"{c.master.url}/api/v1/proxy_tickets", json={"taskId": nid}, timeout=30
    )
    assert theirs.status_code == 403

    killed = det(c, "notebook", "kill", nid)
    assert killed.returncode == 0, killed.stderr
    wait_for(lambda: notebook(c, nid)["state"] == "STATE_TERMINATED", 60, "the kill")
    gone = plain().get(f"{base}lab", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert gone.status_code == 503


def test_idle_notebook_is_killed(shared_one_slot: Cluster) -> None:
    c = shared_one_slot
    body = {"config": {"idle_timeout": "5s", "notebook_idle_type": "activity"}}
    nid = c.master.post("/api/v1/notebooks", body)["notebook"]["id"]
    wait_for(
        lambda: c.master.get(f"/api/v1/tasks/{nid}")["task"]["allocations"][0].get("isReady"),
        180,
        "the notebook to be ready",
    )
    wait_for(lambda: notebook(c, nid)["state"] == "STATE_TERMINATED", 60, "the idle kill")
    assert "idle" in str(notebook(c, nid)["exitStatus"])


def test_a_busy_kernel_keeps_a_notebook_alive_until_it_is_idle(shared_one_slot: Cluster) -> None:
    # The default notebook_idle_type (kernels_or_terminals): Jupyter's own activity and kernels.
    c = shared_one_slot
    body = {"config": {"idle_timeout": "8s"}}
    nid = c.master.post("/api/v1/notebooks", body)["notebook"]["id"]
    wait_for(
        lambda: c.master.get(f"/api/v1/tasks/{nid}")["task"]["allocations"][0].get("isReady"),
        180,
        "the notebook to be ready",
    )
    base = f"{c.master.url}/proxy/{nid}/"
    # Busy for longer than the timeout, silently: the notebook must live through it.
    assert execute(c, base, c.master.token, "import time; time.sleep(20); 6*7") == "42"
    assert notebook(c, nid)["state"] == "STATE_RUNNING"
    wait_for(lambda: notebook(c, nid)["state"] == "STATE_TERMINATED", 90, "the idle kill")
    assert "idle" in str(notebook(c, nid)["exitStatus"])


def test_official_cli_starts_a_notebook(shared_one_slot: Cluster) -> None:
    c = shared_one_slot
    before = {n["id"] for n in c.master.get("/api/v1/notebooks")["notebooks"]}
    r = det(c, "notebook", "start", "--no-browser", official=True)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    assert "Jupyter Notebook is running at" in r.stdout, r.stdout
    listed = json.loads(det(c, "notebook", "list", "--json", official=True).stdout)
    listed = [n for n in listed if n["id"] not in before]  # earlier tests' are the cluster's
    assert [n["state"] for n in listed] == ["RUNNING"]
    for n in listed:
        c.master.post(f"/api/v1/notebooks/{n['id']}/kill")


@pytest.mark.browser
def test_a_browser_runs_code_in_the_proxied_jupyterlab(
    shared_one_slot: Cluster, page: Any, tmp_path: Path
) -> None:
    """``det notebook start`` of the official CLI, followed to the URL it opens (issue 26):
    its browser (``BROWSER``, recorded) gets the WebUI's /det/interactive/... link; Chromium
    logs in there, and is sent on to the notebook on the tasks' own origin (a ticket that
    becomes a cookie), starts a Python notebook from JupyterLab's launcher and runs ``6*7`` in
    its kernel, whose WebSocket goes through the master's proxy."""
    c = shared_one_slot
    before = {n["id"] for n in c.master.get("/api/v1/notebooks")["notebooks"]}
    opened = tmp_path / "opened.txt"
    recorder = tmp_path / "browser.py"
    recorder.write_text("import sys\nopen(sys.argv[2], 'a').write(sys.argv[1] + '\\n')\n")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "DET_MASTER": c.master.url,
        "DET_USER": "admin",
        "DET_PASS": ADMIN_PASSWORD,
        "BROWSER": f"{sys.executable} {recorder} %s {opened}",
    }
    r = subprocess.run(
        [str(ensure_official_venv() / "det"), "notebook", "start"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{c.dump()}"
    (url,) = opened.read_text().splitlines()
    (nid,) = [
        n["id"]
        for n in c.master.get("/api/v1/notebooks")["notebooks"]
        if n["state"] != "STATE_TERMINATED" and n["id"] not in before
    ]
    assert url.startswith(f"{c.master.url}/det/interactive/{nid}/"), url
    assert c.master.get(f"/api/v1/tasks/{nid}")["task"]["allocations"][0].get("isReady")

    page.set_default_timeout(90_000)  # JupyterLab's bundles on a busy machine
    page.goto(url)
    page.wait_for_url("**/det/login**")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", ADMIN_PASSWORD)
    page.click("button[type=submit]")
    # The user's own notebook, ready: the WebUI opens it without a click (issue 38 item 6).
    page.wait_for_url(f"http://{nid}.localhost:*/proxy/{nid}/lab**")
    # The WebUI's session stays on its origin: JupyterLab's pages cannot read it.
    assert page.evaluate("() => localStorage.getItem('det.token')") is None
    page.locator(".jp-LauncherCard[data-category='Notebook']").first.click()

    def kernel_idle() -> bool:
        # The new notebook's kernel has started (keys typed before then were lost on a busy
        # machine, and Shift+Enter ran an empty cell).
        r = plain().get(
            f"{c.master.url}/proxy/{nid}/api/kernels",
            headers={"Authorization": f"Bearer {c.master.token}"},
            timeout=30,
        )
        return r.ok and any(k.get("execution_state") == "idle" for k in r.json())

    wait_for(kernel_idle, 120, "the notebook's kernel to be idle")
    cell = page.locator(".jp-Notebook .jp-Cell").first
    cell.locator(".cm-content").click()
    page.keyboard.type("6*7")
    wait_for(
        lambda: cell.locator(".cm-content").inner_text().strip() == "6*7", 30, "the typed code"
    )
    page.keyboard.press("Shift+Enter")
    out = page.locator(".jp-Notebook .jp-OutputArea-output").first
    out.wait_for()
    assert out.inner_text().strip() == "42"
    kernels = (
        plain()
        .get(
            f"{c.master.url}/proxy/{nid}/api/kernels",
            headers={"Authorization": f"Bearer {c.master.token}"},
            timeout=30,
        )
        .json()
    )
    assert len(kernels) == 1 and kernels[0]["connections"] >= 1, kernels
    c.master.post(f"/api/v1/notebooks/{nid}/kill")
