"""``det master policy show|set FILE.yaml|history`` (cli/master_policy.py) against the master's
app in this process (``in_process_cli_master``): an admin stores a policy from a file (the policy's keys, or a master.yaml holding
``task_container_policy``), every user shows it, a user's set and a bad file are refused with
one line, and the history lists the changes newest first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration import cli_support
from tests.integration.cli_support import Det, det  # noqa: F401 (fixture)
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration
cli_master = cli_support.in_process_cli_master


def test_an_admin_sets_the_policy_from_a_file_and_every_user_shows_it(
    cli_master: InProcessMaster,
    det: Det,  # noqa: F811
    tmp_path: Path,
) -> None:
    det.login()
    shown = det.ok("master", "policy", "show")
    assert shown.out.startswith("# master.yaml's"), shown.out
    assert json.loads(det.ok("master", "policy", "show", "--json").out)["source"] == "master.yaml"

    policy = tmp_path / "policy.yaml"
    policy.write_text("bind_mounts:\n  - {host_path: /srv/datasets, read_only: true}\n")
    r = det.ok("master", "policy", "set", str(policy))
    assert r.out.startswith("task container policy stored by admin at "), r.out
    master_yaml = tmp_path / "master.yaml"
    master_yaml.write_text("port: 8080\ntask_container_policy:\n  devices: ['c 10:229']\n")
    det.ok("master", "policy", "set", str(master_yaml))

    body = json.loads(det.ok("master", "policy", "show", "--json").out)
    assert body["source"] == "database" and body["updatedBy"] == "admin"
    assert body["policy"]["devices"] == ["c 10:229"] and body["policy"]["bind_mounts"] is None
    assert "# stored by admin at " in det.ok("master", "policy", "show").out
    history = json.loads(det.ok("master", "policy", "history", "--json").out)
    assert [h["policy"]["devices"] for h in history] == [["c 10:229"], None]
    table = det.ok("master", "policy", "history").out
    assert "c 10:229" in table and "/srv/datasets" in table

    # a bad file: one line naming the key, nothing stored
    bad = tmp_path / "bad.yaml"
    bad.write_text("devices: [fuse]\n")
    r = det("master", "policy", "set", str(bad))
    assert r.rc != 0 and "policy.devices[0]: 'fuse' is neither" in r.err, r.err
    assert len(r.err.strip().splitlines()) == 1, r.err
    r = det("master", "policy", "set", str(tmp_path / "missing.yaml"))
    assert r.rc == 2 and "cannot read policy file" in r.err, r.err
    bad.write_text("- just\n- a list\n")
    r = det("master", "policy", "set", str(bad))
    assert r.rc == 2 and "a policy is a YAML mapping" in r.err, r.err
    assert len(json.loads(det.ok("master", "policy", "history", "--json").out)) == 2

    # a user reads it, and may not change it
    cli_master.post("/api/v1/users", {"user": {"username": "dora"}, "password": "dora-pw-1234"})
    det.login("dora", "dora-pw-1234")
    assert json.loads(det.ok("master", "policy", "show", "--json").out) == body
    r = det("master", "policy", "set", str(policy))
    assert r.rc != 0 and "only an admin may do this" in r.err, r.err
    r = det("master", "policy", "history")
    assert r.rc != 0 and "only an admin may do this" in r.err, r.err
    det.login()
    assert len(json.loads(det.ok("master", "policy", "history", "--json").out)) == 2
