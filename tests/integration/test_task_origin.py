# ruff: noqa: F811 (the fixtures imported from webui_support are parameters here)
"""Interactive tasks live on their own origin (docs/security.md): a user's task page, opened
by an admin the way the WebUI opens it, cannot read the admin's session, call the API with
the admin's cookies, frame the WebUI or open a WebSocket as the admin; tickets open a page
once; the task cookie dies with the session it came from (logout, password change); a task
sets cookies only for its own path."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import requests

from tests.integration.conftest import wait_for
from tests.integration.task_origin_support import (
    FakeTask,
    cookie_pair,
    serve_from,
    task_request,
)
from tests.integration.threaded import ThreadedMaster
from tests.integration.webui_support import browser, login, page  # noqa: F401

pytestmark = [pytest.mark.integration]

MALLORY_PW = "Mallory-pw-1"

# The page a user's notebook serves: everything a script there might try against whoever
# opens it. Its results go to window.det_results.
ATTACK = """<!doctype html><html><head><title>task</title></head><body><p>a task's page</p>
<iframe name="sink" style="display:none"></iframe>
<form id="f" method="POST" target="sink" enctype="text/plain" action="MASTER/api/v1/users">
<input name='{"user":{"username":"evil2","admin":true},"password":"Evil-pw-2","x":"' value='"}'>
</form>
<script>
(async () => {
  if (!location.pathname.startsWith("/proxy/ATTACKER/")) return;
  const out = {};
  window.det_results = out;
  try { out.localStorage = JSON.stringify(localStorage); } catch (e) { out.localStorage = "error"; }
  out.cookie = document.cookie;
  const status = (p) => p.then(async (r) => r.status + " " + (await r.text())).catch((e) => "error " + e);
  out.me = await status(fetch("MASTER/api/v1/me", { credentials: "include" }));
  out.post = await status(fetch("MASTER/api/v1/users", {
    method: "POST", credentials: "include", headers: { "Content-Type": "text/plain" },
    body: JSON.stringify({ user: { username: "evil1", admin: true }, password: "Evil-pw-1" }) }));
  out.victim = await status(fetch(location.protocol + "//VICTIM.localhost:" + location.port +
    "/proxy/VICTIM/api/contents", { method: "POST", credentials: "include", mode: "no-cors" }));
  out.shared = await status(fetch(location.origin + "/proxy/VICTIM/api/contents",
    { method: "POST", credentials: "include" }));
  document.getElementById("f").submit();
  const frame = document.createElement("iframe");
  frame.name = "webui";
  frame.src = "MASTER/det/";
  document.body.appendChild(frame);
  const ws = (url) => new Promise((done) => {
    try {
      const w = new WebSocket(url);
      w.onopen = () => done("open");
      w.onerror = () => done("error");
      setTimeout(() => done("timeout"), 8000);
    } catch (e) { done("throws " + e); }
  });
  const wsMaster = "MASTER".replace("http", "ws");
  out.wsMaster = await ws(wsMaster + "/proxy/VICTIM/api/kernels/k1/channels");
  out.wsApi = await ws(wsMaster + "/api/v1/tasks/VICTIM/logs?follow=true");
  out.wsVictim = await ws("ws://VICTIM.localhost:" + location.port + "/proxy/VICTIM/api/kernels/k2/channels");
  out.wsShared = await ws(location.origin.replace("http", "ws") + "/proxy/VICTIM/api/kernels/k3/channels");
  out.done = true;
})();
</script></body></html>"""


@pytest.fixture
def fake() -> Iterator[FakeTask]:
    f = FakeTask().start()
    yield f
    f.stop()


def _user(m: ThreadedMaster, name: str, password: str, admin: bool = False) -> str:
    m.post("/api/v1/users", {"user": {"username": name, "admin": admin}, "password": password})
    return m.login(name, password)


def _notebook(m: ThreadedMaster, token: str, pg_url: str, port: int) -> str:
    r = m.session(token).post(m.url + "/api/v1/notebooks", json={"config": {}}, timeout=30)
    assert r.status_code == 200, r.text
    nid = str(r.json()["notebook"]["id"])
    serve_from(pg_url, nid, port)
    return nid


def _ticket(m: ThreadedMaster, token: str, nid: str) -> dict[str, Any]:
    r = m.session(token).post(m.url + "/api/v1/proxy_tickets", json={"taskId": nid}, timeout=30)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


@pytest.mark.browser
def test_an_admin_opening_a_users_task_page_gives_it_nothing(
    threaded_master: ThreadedMaster, pg_url: str, fake: FakeTask, page: Any
) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    m = threaded_master
    mallory = _user(m, "mallory", MALLORY_PW)
    attacker = _notebook(m, mallory, pg_url, fake.port)
    victim = _notebook(m, m.token, pg_url, fake.port)  # the admin's own notebook
    fake.page = (
        ATTACK.replace("MASTER", m.url).replace("ATTACKER", attacker).replace("VICTIM", victim)
    )

    login(page, m, "/det/tasks")
    context = page.context
    # The admin opens their own notebook first (its cookie is in the browser), then the user's.
    with context.expect_page() as opened:
        page.evaluate("id => openNotebook({ id })", victim)
    own = opened.value
    own.wait_for_load_state()
    fake.phase = "attack"
    fake.cookies = ["auth=planted; Path=/", "det_task=planted; Path=/", "mine=1"]
    with context.expect_page() as opened:
        page.evaluate("id => openNotebook({ id })", attacker)
    theirs = opened.value
    theirs.set_default_timeout(60_000)
    with contextlib.suppress(PlaywrightTimeout):  # what it got so far is checked all the same
        theirs.wait_for_function("() => window.det_results && window.det_results.done")
    out = theirs.evaluate("() => window.det_results || {}")

    token = page.evaluate("() => localStorage.getItem('det.token')")
    assert token and token not in json.dumps(out), out
    assert out.get("done"), out
    # (a) The session: not in the task origin's storage, no cookie readable.
    assert out["localStorage"] == "{}", out
    assert out["cookie"] in ("", "mine=1"), out
    assert own.url.startswith(f"http://{victim}.localhost:"), own.url
    assert theirs.url.startswith(f"http://{attacker}.localhost:"), theirs.url
    # (b) The API with the admin's cookies: refused or unreadable, and nothing was created.
    assert not out["me"].startswith("200"), out
    assert not out["post"].startswith("200"), out
    assert not out["shared"].startswith("2"), out
    names = {u["username"] for u in m.get("/api/v1/users")["users"]}
    assert not names & {"evil1", "evil2"}, names
    # (c) The WebUI in a frame: never rendered there.
    wait_for(lambda: any(f.name == "webui" for f in theirs.frames), 30, "the frame")
    time.sleep(2)
    for frame in theirs.frames:
        if frame.name == "webui":
            assert frame.query_selector("#main") is None, frame.url
    # (d) WebSockets to the proxy, the API and the admin's own notebook: none opened.
    assert out["wsMaster"] != "open" and out["wsApi"] != "open", out
    assert out["wsVictim"] != "open" and out["wsShared"] != "open", out
    # The admin's notebook heard nothing during the attack; no task saw the admin's session.
    hits = [s.path for s in fake.seen if s.phase == "attack" and f"/proxy/{victim}/" in s.path]
    assert hits == [], hits
    for s in fake.seen:
        assert token not in json.dumps(s.headers), s
        assert "det_task" not in s.headers.get("cookie", ""), s
    # The task's cookies: only its own, on its own host.
    cookies = {(c["name"], c["domain"]) for c in context.cookies()}
    assert ("auth", "127.0.0.1") not in cookies and ("auth", f"{attacker}.localhost") not in cookies
    assert ("mine", f"{attacker}.localhost") in cookies, cookies
    assert [
        c for c in context.cookies() if c["name"] == "det_task" and c["value"] == "planted"
    ] == []


def test_a_ticket_opens_a_task_once_and_its_cookie_dies_with_the_session(
    threaded_master: ThreadedMaster, pg_url: str, fake: FakeTask
) -> None:
    m = threaded_master
    mallory = _user(m, "mallory", MALLORY_PW)
    nid = _notebook(m, mallory, pg_url, fake.port)
    fake.cookies = [
        "auth=planted; Path=/",
        "det_task=planted",
        f"own=1; Path=/proxy/{nid}/",
        "wide=1; Path=/",
        f"shared=1; Domain=localhost; Path=/proxy/{nid}/",
        "implicit=1",
    ]

    opened = _ticket(m, mallory, nid)
    assert opened["url"].startswith(f"http://{nid}.localhost:"), opened
    first = task_request(opened["url"])
    assert first.status == 302, first.status
    set_cookie = first.getheader("Set-Cookie") or ""
    assert "HttpOnly" in set_cookie and f"Path=/proxy/{nid}/" in set_cookie, set_cookie
    again = task_request(opened["url"])
    assert again.status == 401 and again.reason == "Unauthorized"

    cookie = {"Cookie": cookie_pair(set_cookie)}
    base = opened["url"].split("?")[0]
    ok = task_request(base, headers=cookie)
    assert ok.status == 200
    kept = [cookie_pair(v) for k, v in ok.getheaders() if k.lower() == "set-cookie"]
    assert kept == ["own=1", "implicit=1"], kept
    # The task never sees the cookie, and the cookie means nothing on the WebUI's origin.
    assert all("det_task" not in s.headers.get("cookie", "") for s in fake.seen)
    on_webui = requests.get(f"{m.url}/proxy/{nid}/", headers=cookie, timeout=30)
    assert on_webui.status_code == 401, on_webui.text
    # Another task's host, or another origin's page, gets nothing with it.
    other = base.replace(f"//{nid}.localhost", "//0123abcd.localhost")
    assert task_request(other, headers=cookie).status == 404
    cross = task_request(base, "POST", {**cookie, "Sec-Fetch-Site": "same-site"})
    assert cross.status == 403

    # Logout ends the cookie of a ticket asked with that session.
    second = m.login("mallory", MALLORY_PW)
    hop = task_request(_ticket(m, second, nid)["url"])
    second_cookie = {"Cookie": cookie_pair(hop.getheader("Set-Cookie") or "")}
    assert task_request(base, headers=second_cookie).status == 200
    assert m.session(second).post(m.url + "/api/v1/auth/logout", timeout=30).status_code == 200
    assert task_request(base, headers=second_cookie).status == 401
    assert task_request(base, headers=cookie).status == 200  # the other session lives on

    # A password change ends every session's cookie.
    uid = m.get("/api/v1/me", headers={"Authorization": f"Bearer {mallory}"})["user"]["id"]
    m.post(f"/api/v1/users/{uid}/password", "Mallory-pw-2")
    assert task_request(base, headers=cookie).status == 401


def test_the_webui_origin_serves_no_task_page_and_the_api_no_other_site(
    threaded_master: ThreadedMaster, pg_url: str, fake: FakeTask
) -> None:
    m = threaded_master
    nid = _notebook(m, m.token, pg_url, fake.port)
    fake.cookies = [f"own=1; Path=/proxy/{nid}/"]
    # A browser opening the master's /proxy/ URL (Determined's CLI) is sent to the WebUI, which
    # asks for a ticket on a click.
    nav = requests.get(
        f"{m.url}/proxy/{nid}/lab?x=1",
        headers={"Sec-Fetch-Mode": "navigate", "Accept": "text/html"},
        allow_redirects=False,
        timeout=30,
    )
    assert nav.status_code == 302
    assert nav.headers["Location"] == f"/det/open/{nid}?path=lab%3Fx%3D1", nav.headers
    # A ticket brought here goes, unused, to the task's origin.
    ticket = _ticket(m, m.token, nid)["ticket"]
    hop = requests.get(
        f"{m.url}/proxy/{nid}/lab?det_ticket={ticket}", allow_redirects=False, timeout=30
    )
    assert hop.status_code == 302 and "Set-Cookie" not in hop.headers
    assert hop.headers["Location"].startswith(f"http://{nid}.localhost:"), hop.headers
    assert task_request(hop.headers["Location"]).status == 302
    # A bearer token's request (the CLI, the SDK) is relayed here, sandboxed, with no cookie.
    r = requests.get(f"{m.url}/proxy/{nid}/", headers={"Authorization": f"Bearer {m.token}"})
    assert r.status_code == 200 and "Set-Cookie" not in r.headers
    assert r.headers["Content-Security-Policy"] == "sandbox"
    # The API answers no other site's page, whatever it carries.
    for site in ("same-site", "cross-site"):
        refused = requests.post(
            f"{m.url}/api/v1/auth/logout",
            headers={"Authorization": f"Bearer {m.token}", "Sec-Fetch-Site": site},
            timeout=30,
        )
        assert refused.status_code == 403, refused.text
    assert m.get("/api/v1/me", headers={"Sec-Fetch-Site": "same-origin"})["user"]["admin"]


@pytest.mark.browser
def test_the_links_determineds_cli_opens_open_the_task(
    threaded_master: ThreadedMaster, pg_url: str, fake: FakeTask, page: Any, tmp_path: Any
) -> None:
    """`det notebook open` of the official CLI opens /det/interactive/<id>/jupyter-lab/...
    (its wait page's address inside): the WebUI opens the task from it, as from its own link
    ('Page not found' before), once it is ready and without a click (it is the user's own).
    The URL is the one the official CLI hands its browser."""
    import os
    import subprocess
    import sys

    from tests.compat.official import ensure_official_venv
    from tests.integration.conftest import ADMIN_PASSWORD

    m = threaded_master
    nid = _notebook(m, m.token, pg_url, fake.port)
    fake.page = "<!doctype html><title>the notebook</title><p id=here>opened from the CLI</p>"
    opened = tmp_path / "opened.txt"
    recorder = tmp_path / "browser.py"
    recorder.write_text("import sys\nopen(sys.argv[2], 'a').write(sys.argv[1] + '\\n')\n")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "DET_MASTER": m.url,
        "DET_USER": "admin",
        "DET_PASS": ADMIN_PASSWORD,
        "BROWSER": f"{sys.executable} {recorder} %s {opened}",
    }
    r = subprocess.run(
        [str(ensure_official_venv() / "det"), "notebook", "open", nid],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    url = opened.read_text().splitlines()[0]
    assert url.startswith(f"{m.url}/det/interactive/{nid}/jupyter-lab/"), url
    # Its allocation runs (no agent here), so the WebUI finds it ready and opens the user's own
    # task without a click (issue 38 item 6; test_webui_ops covers the wait and another's task).
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE allocations SET state = 'RUNNING' WHERE task_id = %s", (nid,))
    login(page, m, "/det/tasks")
    page.goto(url)
    page.wait_for_selector("#here")
    assert page.url.startswith(f"http://{nid}.localhost:"), page.url
    # the wait page's own address opens it too
    page.goto(f"{m.url}/det/wait/jupyter-lab/{nid}?eventUrl=x&serviceAddr=y")
    page.wait_for_selector("#here")
    # det's own `det notebook open` opens the task's origin with a ticket, no click needed
    ours = subprocess.run(
        [sys.executable, "-m", "det.cli", "notebook", "open", nid],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
        timeout=120,
        check=False,
    )
    assert ours.returncode == 0, ours.stderr
    ticketed = opened.read_text().splitlines()[1]
    assert ticketed.startswith(f"http://{nid}.localhost:") and "det_ticket=" in ticketed
    page.goto(ticketed)
    page.wait_for_selector("#here")
