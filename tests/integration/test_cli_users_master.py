"""``det user`` and ``det master`` against a live master; login, the token cache and errors."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration import cli_support
from tests.integration.cli_support import Det, run_subprocess
from tests.integration.conftest import ADMIN_PASSWORD, Master, free_port

pytestmark = pytest.mark.integration
cli_master = cli_support.cli_master
det = cli_support.det


def test_login_whoami_logout(det: Det) -> None:
    r = det("user", "whoami")
    assert r.rc == 1
    assert "det user login" in r.err
    det.login()
    assert "logged in as user 'admin'" in det.ok("user", "whoami").out
    det.ok("user", "logout")
    r = det("user", "whoami")
    assert r.rc == 1 and "not logged in" in r.err


def test_login_with_wrong_password_fails_without_caching(det: Det) -> None:
    r = det("user", "login", "admin", stdin="wrong\n")
    assert r.rc == 3 and "wrong username or password" in r.err
    assert r.err.count("\n") == 1 and "Traceback" not in r.err
    assert not det.auth_file.exists() or "admin" not in det.auth_file.read_text()


def test_token_cache_is_private_and_per_master_and_user(det: Det, cli_master: Master) -> None:
    det.login()
    det.ok("user", "create", "carol", "--password", "Carol-pw-1")
    det.login("carol", "Carol-pw-1")
    mode = stat.S_IMODE(det.auth_file.stat().st_mode)
    assert mode == 0o600
    data = json.loads(det.auth_file.read_text())
    entry = data["masters"][cli_master.url]
    assert set(entry["tokens"]) == {"admin", "carol"}
    assert entry["active_user"] == "carol"
    assert "user 'carol'" in det.ok("user", "whoami").out
    # -u picks another cached user without logging in again.
    assert "user 'admin'" in det.ok("-u", "admin", "user", "whoami").out
    # Another master URL has its own (empty) entry: same host, different port.
    other = f"http://127.0.0.1:{free_port()}"
    r = det("-m", other, "user", "whoami")
    assert r.rc == 4 and other in r.err


def test_create_list_and_change_password(det: Det, cli_master: Master) -> None:
    det.login()
    det.ok("user", "create", "dave", "--password", "Dave-pw-1")
    det.ok("user", "create", "erin", "--admin", stdin="Erin-pw-1\n")
    users = {u["username"]: u for u in det.ok("user", "list", "--json").json()}
    assert users["dave"]["admin"] is False and users["erin"]["admin"] is True
    table = det.ok("user", "ls").out
    assert "dave" in table and "Username" in table
    # An admin changes another user's password: the old one stops working.
    det.ok("user", "change-password", "dave", "--password", "Dave-pw-2")
    assert cli_master.login("dave", "Dave-pw-2")
    with pytest.raises(requests.HTTPError):
        cli_master.login("dave", "Dave-pw-1")
    # A user changes their own password and stays logged in.
    det.login("dave", "Dave-pw-2")
    det.ok("user", "change-password", "--password", "Dave-pw-3")
    assert "user 'dave'" in det.ok("user", "whoami").out
    assert cli_master.login("dave", "Dave-pw-3")
    # Creating a user is for admins only: the master's refusal is one line, exit 1.
    r = det("user", "create", "mallory", "--password", "Mallory-pw-1")
    assert r.rc == 1 and r.err.startswith("det: error:") and r.err.count("\n") == 1


def test_revoked_token_logs_in_again_with_det_pass(
    det: Det, cli_master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    det.login()
    token = json.loads(det.auth_file.read_text())["masters"][cli_master.url]["tokens"]["admin"]
    # Revoke the cached token behind the CLI's back.
    requests.post(
        f"{cli_master.url}/api/v1/auth/logout",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    ).raise_for_status()
    monkeypatch.setenv("DET_PASS", ADMIN_PASSWORD)
    assert "user 'admin'" in det.ok("user", "whoami").out
    new = json.loads(det.auth_file.read_text())["masters"][cli_master.url]["tokens"]["admin"]
    assert new != token


def test_revoked_token_without_det_pass_says_how_to_log_in(det: Det, cli_master: Master) -> None:
    det.login()
    token = json.loads(det.auth_file.read_text())["masters"][cli_master.url]["tokens"]["admin"]
    requests.post(
        f"{cli_master.url}/api/v1/auth/logout",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    ).raise_for_status()
    r = det("user", "whoami")
    assert r.rc == 1
    assert "expired or was revoked" in r.err and "det user login admin" in r.err
    # Logging out with a revoked token is not an error.
    det.login()
    token = json.loads(det.auth_file.read_text())["masters"][cli_master.url]["tokens"]["admin"]
    requests.post(
        f"{cli_master.url}/api/v1/auth/logout",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    ).raise_for_status()
    det.ok("user", "logout")
    assert json.loads(det.auth_file.read_text())["masters"][cli_master.url]["tokens"] == {}


def test_det_user_and_det_pass_log_in_without_a_prompt(
    det: Det, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_USER", "admin")
    monkeypatch.setenv("DET_PASS", ADMIN_PASSWORD)
    assert "user 'admin'" in det.ok("user", "whoami").out
    assert det.auth_file.exists()


def test_master_info_config_logs(det: Det, cli_master: Master) -> None:
    info = det.ok("master", "info", "--json").json()
    assert (
        info["clusterId"] == requests.get(cli_master.url + "/info", timeout=10).json()["clusterId"]
    )
    assert "clusterId" in det.ok("master", "info").out  # no login needed
    det.login()
    config = det.ok("master", "config").json()
    assert config["port"] == int(cli_master.url.rsplit(":", 1)[1])
    assert "postgres" not in json.dumps(config["db"]).lower() or "****" in json.dumps(config["db"])
    logs = det.ok("master", "logs").out.splitlines()
    assert any("serving HTTP on" in line for line in logs)
    assert len(det.ok("master", "logs", "--tail", "2").out.splitlines()) == 2


def test_master_down_exits_4_naming_the_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    home = tmp_path / "home"
    for args in (["experiment", "list"], ["master", "info"], ["user", "login", "admin"]):
        r = run_subprocess(url, home, *args, env={"DET_PASS": "x"})
        assert r.returncode == 4, (args, r.stderr)
        assert url in r.stderr
        assert "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


def test_traceback_only_with_debug(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    home = tmp_path / "home"
    r = run_subprocess(url, home, "--debug", "master", "info")
    assert r.returncode != 0
    assert "Traceback" in r.stderr


def test_master_dying_while_following_logs_exits_4(master_factory: Any, tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.integration.cli_support import create_via_api, post_task_logs, sim_config, trials

    m: Master = master_factory()
    eid = create_via_api(m, sim_config("follow-dies", trials=1))  # no agents: it never ends
    tid = cli_support.wait(lambda: trials(m, eid), 30, "a trial")[0]["id"]
    home = tmp_path / "home"
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "DET_MASTER": m.url,
        "DET_USER": "admin",
        "DET_PASS": ADMIN_PASSWORD,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "det.cli", "trial", "logs", "-f", str(tid)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # It is following once a line shipped now comes out.
    task_id = m.get(f"/api/v1/trials/{tid}")["trial"]["taskId"]
    post_task_logs(m, task_id, ["still running"])
    assert proc.stdout is not None
    assert proc.stdout.readline() == "[rank=0] still running\n"
    m.kill()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 4, err
    assert m.url in err and "Traceback" not in err
