"""``det user link-with-agent-user`` (PatchUser's agentUserGroup, issue 27 item 8): admins link a
user to a uid/gid with the official CLI or det's; the user reads it back; root, bad names and
non-admins are refused with one line and change nothing. What a linked user's container runs
as: tests/e2e/test_agent_users.py (real Docker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.compat.official import ensure_official_venv
from tests.integration import cli_support
from tests.integration.cli_support import Det
from tests.integration.conftest import ADMIN_PASSWORD, Master
from tests.integration.test_official_client_answers import Official

pytestmark = pytest.mark.integration
cli_master = cli_support.cli_master
det = cli_support.det


def user(m: Master, name: str) -> dict[str, Any]:
    return dict(m.get(f"/api/v1/users/{name}/by-username")["user"])


def make_user(m: Master, name: str) -> int:
    body = {"user": {"username": name, "admin": False}, "password": "Linked-pw-1"}
    return int(m.post("/api/v1/users", body)["user"]["id"])


def test_the_official_cli_links_and_the_user_reads_it_back(
    cli_master: Master, tmp_path: Path
) -> None:
    make_user(cli_master, "linked")
    o = Official(ensure_official_venv(), cli_master, tmp_path)
    o("user", "login", "admin", stdin=ADMIN_PASSWORD + "\n")
    o(
        "user", "link-with-agent-user", "linked",
        "--agent-uid", "4321", "--agent-gid", "4322",
        "--agent-user", "alice", "--agent-group", "ml",
    )  # fmt: skip
    link = {"agentUid": 4321, "agentGid": 4322, "agentUser": "alice", "agentGroup": "ml"}
    own = cli_master.session(cli_master.login("linked", "Linked-pw-1"))
    assert own.get(f"{cli_master.url}/api/v1/me", timeout=30).json()["user"]["agentUserGroup"] == (
        link
    )
    # The official SDK parses it (v1AgentUserGroup in v1User).
    got = o.python(
        "g = bindings.get_GetUserByUsername(session, username='linked').user.agentUserGroup\n"
        "print(json.dumps(g.to_json()))"
    )
    assert {k: int(v) if k.endswith("id") else v for k, v in got.items()} == link

    # Root, a name that is not one, a missing field: refused, one line, nothing changed.
    for bad, words in (
        ("--agent-uid=0", "agentUid: 0 (root) is refused"),
        ("--agent-gid=0", "agentGid: 0 (root) is refused"),
    ):
        args = ["--agent-uid", "5000", "--agent-gid", "5000", bad]
        r = o.run("user", "link-with-agent-user", "linked", *args, "--agent-user", "bob",
                  "--agent-group", "ml")  # fmt: skip
        assert r.returncode != 0 and words in r.stderr + r.stdout, r.stderr
    s = cli_master.session()
    uid = user(cli_master, "linked")["id"]
    for body, field in (
        ({"agentUid": 7, "agentGid": 7, "agentUser": "x:0:0", "agentGroup": "g"}, "agentUser"),
        ({"agentUid": 7, "agentGid": 7, "agentUser": "x"}, "agentGroup"),
        ({"agentUid": 2**40, "agentGid": 7, "agentUser": "x", "agentGroup": "g"}, "agentUid"),
    ):
        r = s.patch(f"{cli_master.url}/api/v1/users/{uid}", json={"agentUserGroup": body})
        assert r.status_code == 400, r.text
        message = r.json()["message"]
        assert f"agentUserGroup.{field}" in message and "\n" not in message, message
    assert user(cli_master, "linked")["agentUserGroup"] == link


def test_only_admins_link_even_themselves(cli_master: Master) -> None:
    uid = make_user(cli_master, "selflinker")
    own = cli_master.session(cli_master.login("selflinker", "Linked-pw-1"))
    body = {"agentUserGroup": {"agentUid": 1, "agentGid": 1, "agentUser": "a", "agentGroup": "b"}}
    r = own.patch(f"{cli_master.url}/api/v1/users/{uid}", json=body, timeout=30)
    assert r.status_code == 403, r.text
    assert user(cli_master, "selflinker")["agentUserGroup"] is None


def test_our_cli_links_and_unlinks(cli_master: Master, det: Det) -> None:
    make_user(cli_master, "ours")
    det.login()
    r = det("user", "link-with-agent-user", "ours", "--agent-uid", "3000", "--agent-gid", "3001",
            "--agent-user", "carol", "--agent-group", "lab")  # fmt: skip
    assert r.rc == 0, r.err
    assert user(cli_master, "ours")["agentUserGroup"]["agentUid"] == 3000
    r = det("user", "link-with-agent-user", "ours", "--agent-uid", "3000")
    assert r.rc != 0 and "--agent-gid, --agent-user, --agent-group required" in r.err
    assert det("user", "link-with-agent-user", "ours", "--unlink").rc == 0
    assert user(cli_master, "ours")["agentUserGroup"] is None
