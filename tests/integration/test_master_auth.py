"""Authentication and users against a master on a real PostgreSQL: its app in the test's
process (``api_master``) for what is API alone, with its control loop (``loop_master``) for a
task's token (a simulated agent runs the trials), and a ``det-master`` process for the master's
refusal to start."""

from __future__ import annotations

import hashlib

import pytest
import requests

from tests.integration.conftest import ADMIN_PASSWORD, MasterClient
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration


def test_info_and_health_need_no_token(api_master: MasterClient) -> None:
    info = api_master.new_session().get(api_master.url + "/info", timeout=5).json()
    assert info["clusterId"]
    assert (
        api_master.new_session().get(api_master.url + "/health", timeout=5).json()["healthy"]
        is True
    )


@pytest.mark.parametrize(
    "path", ["/api/v1/me", "/api/v1/experiments", "/api/v1/job-queues", "/api/v1/agents"]
)
def test_api_rejects_missing_or_bad_token(api_master: MasterClient, path: str) -> None:
    assert api_master.new_session().get(api_master.url + path, timeout=5).status_code == 401
    bad = api_master.new_session().get(
        api_master.url + path, headers={"Authorization": "Bearer nope"}, timeout=5
    )
    assert bad.status_code == 401
    assert "token" in bad.json()["message"]


def test_login_accepts_plain_and_client_hashed_passwords(api_master: MasterClient) -> None:
    hashed = hashlib.sha512(("GubPEmmotfiK9TMD6Zdw" + ADMIN_PASSWORD).encode()).hexdigest()
    r = api_master.new_session().post(
        api_master.url + "/api/v1/auth/login",
        json={"username": "admin", "password": hashed, "isHashed": True},
        timeout=5,
    )
    assert r.status_code == 200
    assert r.json()["user"]["username"] == "admin"
    wrong = api_master.new_session().post(
        api_master.url + "/api/v1/auth/login",
        json={"username": "admin", "password": "x"},
        timeout=5,
    )
    assert wrong.status_code == 401


def test_logout_revokes_the_token(api_master: MasterClient) -> None:
    token = api_master.login()
    s = api_master.session(token)
    assert s.get(api_master.url + "/api/v1/me", timeout=5).status_code == 200
    assert s.post(api_master.url + "/api/v1/auth/logout", timeout=5).status_code == 200
    assert s.get(api_master.url + "/api/v1/me", timeout=5).status_code == 401


def test_admin_creates_user_who_cannot_create_users(api_master: MasterClient) -> None:
    api_master.post(
        "/api/v1/users", {"user": {"username": "alice", "admin": False}, "password": "Alice-pw-1"}
    )
    alice = api_master.login("alice", "Alice-pw-1")
    r = api_master.session(alice).post(
        api_master.url + "/api/v1/users",
        json={"user": {"username": "bob"}, "password": "Bob-pw-12"},
        timeout=5,
    )
    assert r.status_code == 403
    dup = api_master.session().post(
        api_master.url + "/api/v1/users",
        json={"user": {"username": "alice"}, "password": "x"},
        timeout=5,
    )
    assert dup.status_code == 409


def test_password_change_ends_other_sessions(api_master: MasterClient) -> None:
    api_master.post("/api/v1/users", {"user": {"username": "carol"}, "password": "Carol-pw-1"})
    old = api_master.login("carol", "Carol-pw-1")
    me = api_master.session(old).get(api_master.url + "/api/v1/me", timeout=5).json()["user"]
    r = api_master.session(old).patch(
        api_master.url + f"/api/v1/users/{me['id']}", json={"password": "Carol-pw-2"}, timeout=5
    )
    assert r.status_code == 200
    assert api_master.session(old).get(api_master.url + "/api/v1/me", timeout=5).status_code == 401
    assert api_master.login("carol", "Carol-pw-2")


def test_master_config_hides_secrets(api_master: MasterClient) -> None:
    cfg = api_master.get("/api/v1/master/config")["config"]
    assert cfg["security"]["initial_user_password"] == "********"
    assert ADMIN_PASSWORD not in str(cfg)


def test_master_refuses_empty_admin_password(tmp_path, pg_url) -> None:  # type: ignore[no-untyped-def]
    from tests.integration.conftest import start_master

    with pytest.raises(RuntimeError, match="initial_user_password"):
        start_master(tmp_path, pg_url, extra={"security": {"initial_user_password": ""}})


def test_unknown_master_config_key_is_named(tmp_path, pg_url) -> None:  # type: ignore[no-untyped-def]
    from tests.integration.conftest import start_master

    with pytest.raises(RuntimeError, match="unknown key 'resource_manger'"):
        start_master(tmp_path, pg_url, extra={"resource_manger": {}})


def test_a_bad_trusted_proxies_entry_stops_the_master_naming_it(master_factory) -> None:  # type: ignore[no-untyped-def]
    # moved from test_master_trusted_proxies.py (whose other tests run in-process)
    with pytest.raises(RuntimeError, match=r"security.trusted_proxies.*entry 1: 'lb.example'"):
        master_factory(extra={"security": {
            "initial_user_password": ADMIN_PASSWORD, "trusted_proxies": ["10.0.0.1", "lb.example"],
        }})  # fmt: skip


def test_allocation_token_is_limited_to_its_own_task(loop_master: InProcessMaster) -> None:
    import threading

    from tests.fakes.sim_agent import SimAgent, wait

    specs: list[dict[str, object]] = []
    done = threading.Event()

    def capture(master: str, spec: dict[str, object], killed: threading.Event) -> int:
        specs.append(spec)
        done.wait(30)
        return 0

    agent = SimAgent(
        loop_master.url, loop_master.agent_token, "sim-0", slots=2, train=capture
    ).start()
    try:
        cfg = "name: t\nentrypoint: x\nsearcher: {name: random, metric: loss, max_trials: 2, max_concurrent_trials: 2}\nhyperparameters: {lr: {type: double, minval: 0.1, maxval: 1}}\n"
        loop_master.post("/api/v1/experiments", {"config": cfg, "activate": True})
        wait(lambda: len(specs) == 2, 30, "two tasks")
        env_a = specs[0]["env"]
        env_b = specs[1]["env"]
        assert isinstance(env_a, dict) and isinstance(env_b, dict)
        h = {"Grpc-Metadata-x-allocation-token": f"Bearer {env_a['DET_SESSION_TOKEN']}"}
        own = requests.get(
            f"{loop_master.url}/api/v1/trials/{env_a['DET_TRIAL_ID']}", headers=h, timeout=5
        )
        assert own.status_code == 200
        other = requests.get(
            f"{loop_master.url}/api/v1/trials/{env_b['DET_TRIAL_ID']}", headers=h, timeout=5
        )
        assert other.status_code == 403
        assert (
            requests.get(f"{loop_master.url}/api/v1/users", headers=h, timeout=5).status_code == 403
        )
        agent_h = {"Authorization": f"Bearer {loop_master.agent_token}"}
        assert (
            requests.get(
                f"{loop_master.url}/api/v1/experiments", headers=agent_h, timeout=5
            ).status_code
            == 401
        )
    finally:
        done.set()
        agent.stop()


@pytest.mark.parametrize(
    "username",
    [
        "",
        "a b",
        "../admin",
        "x/y",
        "evil\u202egnp.exe",
        "tab\there",
        ".hidden",
        "nul\x00x",
        "u" * 129,
    ],
)
def test_usernames_that_could_mislead_are_refused(api_master: MasterClient, username: str) -> None:
    before = api_master.get("/api/v1/users")["users"]
    r = api_master.session().post(
        api_master.url + "/api/v1/users",
        json={"user": {"username": username}, "password": "pw-123456"},
        timeout=5,
    )
    assert r.status_code == 400, r.text
    assert "username" in r.json()["message"]
    assert api_master.get("/api/v1/users")["users"] == before


def test_ordinary_usernames_are_accepted(api_master: MasterClient) -> None:
    for name in ("alice", "bob.smith@example.com", "j_doe-2+ml", "José"):
        r = api_master.session().post(
            api_master.url + "/api/v1/users",
            json={"user": {"username": name}, "password": "pw-123456"},
            timeout=5,
        )
        assert r.status_code == 200, (name, r.text)


def test_a_restart_hashes_no_password_and_keeps_the_admins(
    api_master: InProcessMaster,
    tmp_path,
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    """The first start made ``admin`` and ``determined``; a master starting again on that
    database (a restart, a serverless instance's cold start) hashes no password for them (two
    scrypt hashes, ~40 CPU-ms each, went to rows the insert dropped) and keeps the password
    admin changed, not the initial one."""
    from det.master.services import users
    from tests.integration.inproc import in_process_master

    me = api_master.get("/api/v1/me")["user"]
    r = api_master.session().patch(
        api_master.url + f"/api/v1/users/{me['id']}", json={"password": "Admin-pw-2"}, timeout=5
    )
    assert r.status_code == 200, r.text

    def no_hash(_: str) -> str:
        raise AssertionError("a password was hashed at a start with both users present")

    monkeypatch.setattr(users, "hash_password", no_hash)
    with in_process_master(tmp_path / "again", api_master.db_url) as again:
        assert again.login("admin", "Admin-pw-2")
        r = again.new_session().post(
            again.url + "/api/v1/auth/login",
            json={"username": "admin", "password": ADMIN_PASSWORD},
            timeout=5,
        )
        assert r.status_code == 401, r.text


def test_the_first_start_on_an_empty_database_makes_admin_and_determined(
    api_master: InProcessMaster,
    pg_url: str,  # an empty database: the master migrates it and makes the users
) -> None:
    """As Determined: ``admin`` (an admin) and ``determined`` (not one), both with the initial
    password, made by the master's first start (other tests' databases are copies of a
    template that holds them already)."""
    users = {u["username"]: u for u in api_master.get("/api/v1/users")["users"]}
    assert set(users) == {"admin", "determined"}, users
    assert users["admin"]["admin"] is True and users["determined"]["admin"] is False
    assert api_master.login("admin", ADMIN_PASSWORD)
    assert api_master.login("determined", ADMIN_PASSWORD)
