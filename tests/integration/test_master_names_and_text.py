"""Names and text that cannot deceive: usernames compared after NFKC without case, lookalikes
of existing names refused, ``active: false`` honoured at creation, endless tokens for admins
only, ``/me`` for a task's token, and lone surrogates refused at the JSON boundary. The master's
app in the test's process (``api_master``; a restart is a second one started on the database,
``api_master_factory``; a command's token needs its control loop and a SimAgent,
``loop_master``)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import psycopg
import pytest
import requests

from tests.fakes.sim_agent import SimAgent, wait
from tests.integration.conftest import ADMIN_PASSWORD, MasterClient
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration


def _create(m: MasterClient, username: str, *, active: bool | None = None) -> requests.Response:
    user: dict[str, Any] = {"username": username}
    if active is not None:
        user["active"] = active
    return m.session().post(
        m.url + "/api/v1/users", json={"user": user, "password": "pw-1234"}, timeout=30
    )


def _login(m: MasterClient, username: str, password: str = "pw-1234") -> requests.Response:
    return m.new_session().post(
        m.url + "/api/v1/auth/login",
        json={"username": username, "password": password},
        timeout=30,
    )


def _usernames(m: MasterClient) -> list[str]:
    return sorted(u["username"] for u in m.get("/api/v1/users")["users"])


def test_usernames_differing_in_case_or_width_or_by_lookalikes_are_one(
    api_master: MasterClient,
) -> None:
    m = api_master
    assert _create(m, "alice").status_code == 200
    assert _create(m, "ace").status_code == 200
    before = _usernames(m)
    for clash, status, says in [
        ("ALICE", 409, "user 'alice' already exists"),
        ("\uff41\uff4c\uff49\uff43\uff45", 409, "user 'alice' already exists"),  # full-width
        ("\uff21\uff24\uff2d\uff29\uff2e", 409, "user 'admin' already exists"),  # ADMIN
        ("\u0430dmin", 400, "username: mixes letters of the scripts cyrillic, latin"),
        ("\u0430\u0441\u0435", 409, "reads the same as the existing user 'ace'"),  # Cyrillic
        ("\u03b1ce", 400, "username: mixes letters of the scripts greek, latin"),
    ]:
        r = _create(m, clash)
        assert (r.status_code, says in r.json()["message"]) == (status, True), (clash, r.text)
    assert _usernames(m) == before
    # Stored in NFKC: a full-width name that clashes with nothing becomes plain letters.
    r = _create(m, "\uff43\uff41\uff52\uff4f\uff4c")
    assert r.status_code == 200 and r.json()["user"]["username"] == "carol"
    # Names in other scripts, and the mixes Japanese needs, are fine.
    for ok in ("\u0434\u0438\u043c\u0430", "\u5c71\u7530\u305f\u308d\u3046", "taro\u5c71\u7530"):
        assert _create(m, ok).status_code == 200, ok


def test_login_and_lookup_find_a_user_whatever_case_they_type(api_master: MasterClient) -> None:
    m = api_master
    assert _create(m, "Dora").status_code == 200
    for typed in ("Dora", "dora", "DORA", "\uff24\uff4f\uff52\uff41"):
        r = _login(m, typed)
        assert r.status_code == 200, (typed, r.text)
        assert r.json()["user"]["username"] == "Dora"
    assert m.get("/api/v1/users/dora/by-username")["user"]["username"] == "Dora"
    # Failures count against the name as users are told apart: ALICE and alice share a limit.
    assert _login(m, "admin", "wrong").status_code == 401
    assert _login(m, "ADMIN", ADMIN_PASSWORD).status_code == 200


def test_a_rename_is_held_to_the_same_rules(api_master: MasterClient) -> None:
    m = api_master
    ids = {}
    for name in ("erin", "frank"):
        r = _create(m, name)
        ids[name] = r.json()["user"]["id"]
    s = m.session()
    r = s.patch(f"{m.url}/api/v1/users/{ids['frank']}", json={"username": "ERIN"}, timeout=30)
    assert r.status_code == 409 and "user 'erin' already exists" in r.json()["message"]
    r = s.patch(f"{m.url}/api/v1/users/{ids['frank']}", json={"username": "fr\u0430nk"}, timeout=30)
    assert r.status_code == 400 and "mixes letters" in r.json()["message"]
    # A user may change the case of its own name.
    r = s.patch(f"{m.url}/api/v1/users/{ids['erin']}", json={"username": "Erin"}, timeout=30)
    assert r.status_code == 200 and r.json()["user"]["username"] == "Erin"
    assert _login(m, "erin").status_code == 200


def test_rows_from_before_the_keys_keep_working(
    api_master_factory: Any, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Users written before usernames had keys (two differing only in case included) log in
    after a restart: the older one also by any case, the newer by its exact name. The restart
    is a second master started on the database (its startup, ``server.prepare``, is what reads
    the old rows); its log is what this process logs while it starts."""
    api_master_factory(name="first")  # migrates the database and makes the admin
    hashed = None
    with psycopg.connect(pg_url, autocommit=True) as conn:
        hashed = conn.execute("SELECT password_hash FROM users WHERE username = 'admin'").fetchone()
        assert hashed is not None
        for name in ("Gus", "gus"):
            conn.execute(
                "INSERT INTO users (username, password_hash) VALUES (%s, %s)", (name, hashed[0])
            )
    caplog.set_level(logging.INFO)  # a det-master's log level
    again = api_master_factory(name="again")
    assert _login(again, "Gus", ADMIN_PASSWORD).json()["user"]["username"] == "Gus"
    assert _login(again, "gus", ADMIN_PASSWORD).json()["user"]["username"] == "gus"
    assert _login(again, "GUS", ADMIN_PASSWORD).json()["user"]["username"] == "Gus"
    assert "differ only in case or width" in caplog.text


def test_a_user_created_inactive_cannot_log_in(api_master: MasterClient) -> None:
    m = api_master
    r = _create(m, "hank", active=False)
    assert r.status_code == 200 and r.json()["user"]["active"] is False
    assert _login(m, "hank").status_code == 401
    assert _create(m, "ida").json()["user"]["active"] is True


def test_only_an_admin_creates_a_token_that_never_expires(api_master: MasterClient) -> None:
    m = api_master
    user_id = _create(m, "jack").json()["user"]["id"]
    jack = m.session(_login(m, "jack").json()["token"])
    for lifespan, status in [("-1", 400), ("100000h", 400), ("720h", 200), ("8760h", 200)]:
        r = jack.post(
            m.url + "/api/v1/tokens", json={"userId": user_id, "lifespan": lifespan}, timeout=30
        )
        assert r.status_code == status, (lifespan, r.text)
        if status == 400:
            assert r.json()["message"].startswith("lifespan: ")
    r = m.session().post(
        m.url + "/api/v1/tokens", json={"userId": user_id, "lifespan": "-1"}, timeout=30
    )
    assert r.status_code == 200, r.text


def test_me_with_a_commands_token_answers_its_owner(loop_master: InProcessMaster) -> None:
    m = loop_master
    _create(m, "kim")
    kim = m.session(_login(m, "kim").json()["token"])
    specs: list[dict[str, Any]] = []
    release = threading.Event()

    def hold(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        specs.append(spec)
        while not release.is_set() and not killed.is_set():
            release.wait(0.2)
        return 0

    agent = SimAgent(m.url, m.agent_token, "sim-names-0", slots=1, train=hold).start()
    try:
        r = kim.post(
            m.url + "/api/v1/commands",
            json={"config": {"entrypoint": ["true"], "resources": {"slots": 0}}},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        wait(lambda: len(specs) == 1, 60, "the command running")
        token = specs[0]["env"]["DET_SESSION_TOKEN"]
        r = requests.get(
            m.url + "/api/v1/me",
            headers={"Grpc-Metadata-x-allocation-token": f"Bearer {token}"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        assert r.json()["user"]["username"] == "kim"
    finally:
        release.set()
        agent.stop()


# Routes with a text field that once answered 500 to a lone surrogate, and others.
SURROGATE_BODIES = [
    ("POST", "/api/v1/workspaces", {"name": "\ud800"}, "name"),
    ("POST", "/api/v1/workspaces", {"name": "ok", "agentUserGroup": {"x": "\udfff"}}, "agentUserGroup.x"),
    ("POST", "/api/v1/models", {"name": "m", "description": "a\ud83d"}, "description"),
    ("POST", "/api/v1/users", {"user": {"username": "\ud800x"}, "password": "p"}, "user.username"),
    ("POST", "/api/v1/tokens", {"userId": 1, "description": "\udc00"}, "description"),
    ("POST", "/api/v1/commands", {"config": {"description": "\ud800"}}, "config.description"),
]  # fmt: skip


def test_a_lone_surrogate_is_refused_naming_the_field(api_master: MasterClient) -> None:
    import json

    m = api_master
    s = m.session()
    before = len(m.get("/api/v1/workspaces")["workspaces"])
    for method, path, body, field in SURROGATE_BODIES:
        # json.dumps writes the surrogate as an escape: "\ud800".
        r = s.request(method, m.url + path, data=json.dumps(body), timeout=30,
                      headers={"Content-Type": "application/json"})  # fmt: skip
        assert r.status_code == 400, (path, r.status_code, r.text)
        assert r.json()["message"] == (
            f"{field}: is not valid Unicode text (a lone surrogate such as \\ud800)"
        ), r.text
    # The same surrogate encoded as UTF-8 bytes, and bytes that are not UTF-8 at all.
    r = s.post(m.url + "/api/v1/workspaces", data=b'{"name": "\xed\xa0\x80"}', timeout=30,
               headers={"Content-Type": "application/json"})  # fmt: skip
    assert (r.status_code, r.json()["message"].split(":")[0]) == (400, "name"), r.text
    r = s.post(m.url + "/api/v1/workspaces", data=b'{"name": "\xff"}', timeout=30,
               headers={"Content-Type": "application/json"})  # fmt: skip
    assert r.status_code == 400 and r.json()["message"] == "request body is not valid UTF-8"
    assert len(m.get("/api/v1/workspaces")["workspaces"]) == before
    # A pair that is whole is text like any other.
    r = s.post(m.url + "/api/v1/workspaces", json={"name": "ws \U0001f600"}, timeout=30)
    assert r.status_code == 200, r.text
