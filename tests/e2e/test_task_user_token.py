"""Inside a task, the user's own tools work as the task's owner (issue 38): in det's default task
image a command runs the official 0.38.1 SDK's ``client.login(); client.list_experiments()`` and
the official ``det e list``, unprompted, with the ``DET_USER_TOKEN`` the master gave it; what
only another user may do to their experiment (delete it: an open workspace lets every user stop
it, not delete it) stays out of reach, and the token is dead once the task has ended."""

from __future__ import annotations

import base64
import json
import re

import psycopg
import pytest

from det.master.services.users import task_session_token
from tests.e2e.cluster import Cluster, plain, unique, wait_for

pytestmark = pytest.mark.e2e

EXPERIMENT = "name: bobs\nentrypoint: x\nsearcher: {name: single, metric: loss}\n"

CHECK = """
from determined.common.api import errors
from determined.experimental import client

client.login()
print("sdk sees", sorted(e.id for e in client.list_experiments()))
try:
    client.get_experiment(BOBS).delete()
except errors.ForbiddenException:
    print("sdk refused")
else:
    raise SystemExit("alice deleted bob's experiment")
"""


def test_official_sdk_and_det_in_a_command_run_as_its_owner(shared_one_slot: Cluster) -> None:
    c = shared_one_slot
    m = c.master
    names = {n: unique(n) for n in ("alice", "bob")}  # a shared cluster keeps earlier users
    for name in names.values():
        m.post("/api/v1/users", {"user": {"username": name}, "password": f"{name}-pw-123"})
    alice, bob = (m.session(m.login(n, f"{n}-pw-123")) for n in names.values())
    r = bob.post(m.url + "/api/v1/experiments", json={"config": EXPERIMENT}, timeout=30)
    assert r.status_code == 200, r.text
    bobs = int(r.json()["experiment"]["id"])
    # Every experiment of the cluster (an open workspace): bob's, and earlier tests' if any.
    every = sorted(
        e["id"] for e in m.get("/api/v1/experiments", params={"limit": 1000})["experiments"]
    )
    assert bobs in every

    script = CHECK.replace("BOBS", str(bobs)).encode()
    entrypoint = (
        "python3 check.py && det e list --all && det user whoami"
        f" && (det e delete {bobs} --yes; echo det delete exited $?)"
    )
    r = alice.post(
        m.url + "/api/v1/commands",
        json={
            "config": {"entrypoint": [entrypoint]},
            "files": [
                {
                    "path": "check.py",
                    "type": 48,
                    "content": base64.b64encode(script).decode(),
                    "mode": 0o644,
                    "mtime": 0,
                }
            ],
        },
        timeout=30,
    )
    assert r.status_code == 200, r.text
    task_id = r.json()["command"]["id"]

    def ended() -> dict[str, object] | None:
        cmd = alice.get(m.url + f"/api/v1/commands/{task_id}", timeout=10).json()["command"]
        return cmd if cmd["state"] == "STATE_TERMINATED" else None

    cmd = wait_for(ended, 300, "the command to end")
    raw = alice.get(m.url + f"/api/v1/tasks/{task_id}/logs", timeout=30).text
    out = "".join(
        str((json.loads(line).get("result") or {}).get("log") or "")
        for line in raw.splitlines()
        if line.strip()
    )
    assert cmd["exitStatus"] == "exited with code 0", f"{cmd}\n{out}\n{c.dump()}"
    assert f"sdk sees {every}" in out, out
    assert "sdk refused" in out, out
    assert "bobs" in out, out  # det e list --all
    assert f"logged in as user '{names['alice']}'" in out, out  # det user whoami
    assert re.search(r"det delete exited [1-9]", out), out
    assert "ModuleNotFoundError" not in out, out
    assert (
        alice.get(m.url + f"/api/v1/experiments/{bobs}", timeout=10).json()["experiment"]["state"]
        == "STATE_PAUSED"
    )

    # The token it had (derived as the master derives it) is refused now that it has ended.
    with psycopg.connect(c.db_url) as conn:
        secret = conn.execute("SELECT token_secret FROM cluster").fetchone()[0]  # type: ignore[index]
        allocations = [
            str(row[0])
            for row in conn.execute("SELECT id FROM allocations WHERE task_id = %s", (task_id,))
        ]
    assert len(allocations) == 1
    token = task_session_token(secret, allocations[0])
    me = plain().get(m.url + "/api/v1/me", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert me.status_code == 401, me.text
