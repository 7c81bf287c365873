"""``det user link-with-agent-user`` (PatchUser's agentUserGroup, issue 27 item 8): admins link a
user to a uid/gid with the official CLI or det's; the user reads it back; root, bad names and
non-admins are refused with one line and change nothing. What a linked user's container runs
as: tests/e2e/test_agent_users.py (real Docker). The official CLI is a process of its own: the
module's master is served on a real port by a thread of the test's process
(``cli_support.threaded_cli_master``); det's CLI runs in the test's process against the app
(``loop_master_factory``). Nothing here needs a master process."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.compat.official import ensure_official_venv
from tests.integration import cli_support
from tests.integration.cli_support import Det
from tests.integration.conftest import ADMIN_PASSWORD, MasterClient
from tests.integration.test_official_client_answers import Official

pytestmark = pytest.mark.integration
cli_master = cli_support.threaded_cli_master
det = cli_support.det


def user(m: MasterClient, name: str) -> dict[str, Any]:
    return dict(m.get(f"/api/v1/users/{name}/by-username")["user"])


def make_user(m: MasterClient, name: str) -> int:
    body = {"user": {"username": name, "admin": False}, "password": "Linked-pw-1"}
    return int(m.post("/api/v1/users", body)["user"]["id"])


def test_the_official_cli_links_and_the_user_reads_it_back(
    cli_master: MasterClient, tmp_path: Path
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


def test_only_admins_link_even_themselves(cli_master: MasterClient) -> None:
    uid = make_user(cli_master, "selflinker")
    own = cli_master.session(cli_master.login("selflinker", "Linked-pw-1"))
    body = {"agentUserGroup": {"agentUid": 1, "agentGid": 1, "agentUser": "a", "agentGroup": "b"}}
    r = own.patch(f"{cli_master.url}/api/v1/users/{uid}", json=body, timeout=30)
    assert r.status_code == 403, r.text
    assert user(cli_master, "selflinker")["agentUserGroup"] is None


def test_our_cli_links_and_unlinks(cli_master: MasterClient, det: Det) -> None:
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


def test_linking_says_when_the_agent_user_could_not_write_the_checkpoint_storage(
    loop_master_factory: Any, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41 item 5: the link is made, and det's CLI says in one line (stderr; the API in
    X-Det-Warning, which the official client skips) that the user's trials would fail on the
    cluster's shared_fs storage, a directory root made 0755; once it is 1777, nothing."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    m: MasterClient = loop_master_factory(
        extra={"checkpoint_storage": {"type": "shared_fs", "host_path": str(shared)}}
    )
    make_user(m, "alice")
    d = Det(m, tmp_path / "home", capsys, monkeypatch)
    d.login()
    args = ("user", "link-with-agent-user", "alice", "--agent-uid", "1234", "--agent-gid",
            "2345", "--agent-user", "alice", "--agent-group", "ml")  # fmt: skip
    r = d(*args)
    assert r.rc == 0, r.err
    (line,) = [x for x in r.err.splitlines() if x.startswith("warning: ")]
    assert f"agent user 1234:2345 cannot write {shared} (owned by 0:0, mode 0755)" in line
    assert "chmod 1777" in line
    assert user(m, "alice")["agentUserGroup"]["agentUid"] == 1234  # linked all the same

    os.chmod(shared, 0o1777)
    # A TensorBoard level a root task of an older harness made narrow is named too.
    narrow = shared / str(m.get("/api/v1/master")["clusterId"]) / "tensorboard"
    narrow.mkdir(parents=True)
    os.chmod(narrow.parent, 0o1777)
    os.chmod(narrow, 0o755)
    r = d(*args)
    assert r.rc == 0 and f"cannot write {narrow} (owned by 0:0, mode 0755)" in r.err, r.err
    os.chmod(narrow, 0o1777)
    r = d(*args)
    assert r.rc == 0 and "warning" not in r.err, r.err
    got = m.session().patch(
        f"{m.url}/api/v1/users/{user(m, 'alice')['id']}",
        json={
            "agentUserGroup": {
                "agentUid": 1234,
                "agentGid": 2345,
                "agentUser": "a",
                "agentGroup": "g",
            }
        },
        timeout=30,
    )
    assert got.status_code == 200 and "X-Det-Warning" not in got.headers
