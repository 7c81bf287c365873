"""``-w/--workspace`` on det's task commands (``cmd run``, ``notebook start``, ``shell start``,
``tensorboard start``), as the official client has it: a workspace name (or, det's addition,
an id no workspace is named) becomes the launch request's ``workspaceId``; an unknown one is
refused in one line and launches nothing. The master's app runs in the test's process
(``in_process_cli_master``): the searcher's trial is made by loop passes run in the test's
thread (``cli_support.until``)."""

from __future__ import annotations

import pytest

from tests.integration import cli_support
from tests.integration.cli_support import Det, create_via_api, sim_config, trials, until
from tests.integration.conftest import MasterClient

pytestmark = pytest.mark.integration
cli_master = cli_support.in_process_cli_master
det = cli_support.det


def _workspace_of(m: MasterClient, kind: str, task_id: str) -> int:
    return int(m.get(f"/api/v1/{kind}s/{task_id}")[kind]["workspaceId"])


def test_task_commands_launch_into_the_named_workspace(det: Det, cli_master: MasterClient) -> None:
    det.login()
    ws = int(cli_master.post("/api/v1/workspaces", {"name": "team-a"})["workspace"]["id"])
    eid = create_via_api(cli_master, sim_config("tb-ws", trials=1))
    until(cli_master, lambda: trials(cli_master, eid), 30, "the experiment's trial")

    cmd = det.ok("cmd", "run", "-w", "team-a", "-d", "true").out.strip()
    assert _workspace_of(cli_master, "command", cmd) == ws
    nb = det.ok("notebook", "start", "--workspace", str(ws), "-d").out.strip()
    assert _workspace_of(cli_master, "notebook", nb) == ws
    sh = det.ok("shell", "start", "-w", "team-a", "-d").out.strip()
    assert _workspace_of(cli_master, "shell", sh) == ws
    tb = det.ok("tensorboard", "start", str(eid), "-w", "team-a", "-d").out.strip()
    assert _workspace_of(cli_master, "tensorboard", tb) == ws
    # Listing by workspace finds them there.
    listed = cli_master.get("/api/v1/commands", params={"workspaceId": ws})["commands"]
    assert [c["id"] for c in listed] == [cmd]

    before = len(cli_master.get("/api/v1/commands")["commands"])
    r = det("cmd", "run", "-w", "no-such-team", "-d", "true")
    assert r.rc == 1 and r.err.strip().splitlines() == [
        "det: error: --workspace: no workspace named (or with id) 'no-such-team'"
    ], r.err
    r = det("notebook", "start", "-w", "987654", "-d")
    assert r.rc == 1 and "'987654'" in r.err, r.err
    assert len(cli_master.get("/api/v1/commands")["commands"]) == before
    det.ok("cmd", "kill", cmd)
    det.ok("notebook", "kill", nb)
    det.ok("shell", "kill", sh)
    det.ok("tensorboard", "kill", tb)
