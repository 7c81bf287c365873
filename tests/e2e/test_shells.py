"""Shells on a real cluster: ``det shell start -- CMD`` runs CMD over SSH through the master
(the CLI as ssh's ProxyCommand, the shell's own key), an interactive session runs what it is
given, the key and the shell are its owner's only; the official CLI's ``shell start -- CMD``."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from tests.compat.official import ensure_official_venv
from tests.e2e.cluster import Cluster, unique
from tests.e2e.test_commands import det
from tests.e2e.ws import WebSocket
from tests.integration.conftest import ADMIN_PASSWORD

pytestmark = pytest.mark.e2e


def shell_ids(c: Cluster) -> set[str]:
    return {str(s["id"]) for s in c.master.get("/api/v1/shells")["shells"]}


def test_shell_runs_a_command_and_an_interactive_session(shared_one_slot: Cluster) -> None:
    c = shared_one_slot
    before = shell_ids(c)  # earlier tests' shells are the cluster's
    r = det(c, "shell", "start", "--", "echo", "ok")
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{c.dump()}"
    assert r.stdout.splitlines() == ["ok"], r.stdout
    shells = [s for s in c.master.get("/api/v1/shells")["shells"] if s["id"] not in before]
    assert len(shells) == 1
    sid = shells[0]["id"]
    code = det(c, "shell", "open", sid, "--", "sh", "-c", "exit 7")
    assert code.returncode == 7, code.stderr

    env = {
        **os.environ,
        "HOME": str(c.tmp / "home"),
        "DET_MASTER": c.master.url,
        "DET_USER": "admin",
        "DET_PASS": ADMIN_PASSWORD,
    }
    session = subprocess.run(
        [sys.executable, "-m", "det.cli", "shell", "open", sid],
        input="echo hi-$((6*7))\ncd /tmp && pwd\nexit\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert session.returncode == 0, session.stderr
    assert "hi-42" in session.stdout and "/tmp" in session.stdout, session.stdout

    # Another user sees the shell without its key and cannot reach it.
    eve_name = unique("eve")
    c.master.post(
        "/api/v1/users", {"user": {"username": eve_name, "admin": False}, "password": "Eve-pw-1"}
    )
    eve = c.master.login(eve_name, "Eve-pw-1")
    seen = c.master.session(eve).get(f"{c.master.url}/api/v1/shells/{sid}").json()["shell"]
    assert seen["privateKey"] is None and seen["publicKey"]
    ws = WebSocket(f"{c.master.url}/proxy/{sid}/".replace("http", "ws", 1),
                   {"Authorization": f"Bearer {eve}"})  # fmt: skip
    assert ws.status == 403
    ws.close()
    c.master.post(f"/api/v1/shells/{sid}/kill")


def test_official_cli_runs_a_command_in_a_shell(shared_one_slot: Cluster) -> None:
    c = shared_one_slot
    before = shell_ids(c)
    ensure_official_venv()
    r = det(c, "shell", "start", "--", "echo", "official-ok", official=True)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{c.dump()}"
    assert "official-ok" in r.stdout
    # show-ssh-command (what VS Code and PyCharm users paste): the printed command reaches it.
    (shell,) = [s for s in c.master.get("/api/v1/shells")["shells"] if s["id"] not in before]
    r = det(c, "shell", "show-ssh-command", shell["id"], official=True)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("ssh ")]
    printed = subprocess.run(
        [*shlex.split(line), "echo", "printed-ok"],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(c.tmp / "home-official")},
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    assert "printed-ok" in printed.stdout, f"{printed.stdout}\n{printed.stderr}"
    for sid in shell_ids(c) - before:
        c.master.post(f"/api/v1/shells/{sid}/kill")
