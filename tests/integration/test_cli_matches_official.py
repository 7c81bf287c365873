"""Our ``det`` and the official ``determined==0.38.1`` CLI report the same experiment the same way:
trial ids, states, hyperparameters, batches and validation metrics, for an experiment run to
completion on SimAgents; and the two CLIs side by side on one master for the verbs det's CLI
gained later (issue 38 item 8: user activate/deactivate/edit, workspace list-pools, trial
support-bundle, set priority of each interactive task kind; model list-versions and experiment
download are in test_cli_checkpoints_models, where checkpoints have files): each changes what the
other then reads, and bad input is one line that changes nothing."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.compat.official import ensure_official_venv
from tests.integration import cli_support
from tests.integration.cli_support import Det, exp_state, sim_config
from tests.integration.conftest import ADMIN_PASSWORD, Master
from tests.integration.test_official_client_answers import Official

pytestmark = pytest.mark.integration
cli_master = cli_support.threaded_cli_master
det = cli_support.det
sim_agents = cli_support.sim_agents


@pytest.fixture(scope="module")
def official(cli_master: Master, tmp_path_factory: pytest.TempPathFactory) -> Official:
    o = Official(ensure_official_venv(), cli_master, tmp_path_factory.mktemp("official-home"))
    o("user", "login", "admin", stdin=ADMIN_PASSWORD + "\n")
    return o


@pytest.fixture(scope="module")
def finished(cli_master: Master, sim_agents: object) -> Iterator[int]:
    eid = cli_support.create_via_api(cli_master, sim_config("compare", trials=3))
    cli_support.wait(lambda: exp_state(cli_master, eid) == "STATE_COMPLETED", 90, "completion")
    yield eid


def ours_describe(det: Det, eid: int) -> dict[str, Any]:
    det.login()
    out = det.ok("experiment", "describe", str(eid), "--json").json()
    assert isinstance(out, list) and len(out) == 1
    return dict(out[0])


def test_experiment_describe_json_matches(det: Det, official: Official, finished: int) -> None:
    theirs = json.loads(official("experiment", "describe", str(finished), "--json"))
    ours = [ours_describe(det, finished)]
    assert isinstance(theirs, list) and len(theirs) == len(ours) == 1
    t, o = theirs[0]["experiment"], ours[0]["experiment"]
    for key in (
        "id",
        "name",
        "state",
        "archived",
        "searcherType",
        "numTrials",
        "progress",
        "resourcePool",
    ):
        assert o.get(key) == t.get(key), key
    assert o["config"]["searcher"] == t["config"]["searcher"]
    assert o["config"]["hyperparameters"] == t["config"]["hyperparameters"]


def test_trials_match_official_list_trials(det: Det, official: Official, finished: int) -> None:
    theirs = official.csv("experiment", "list-trials", str(finished))
    ours = ours_describe(det, finished)["trials"]
    assert len(ours) == 3
    assert [int(r["Trial ID"]) for r in theirs] == [t["id"] for t in ours]
    assert [r["State"] for r in theirs] == [t["state"].removeprefix("STATE_") for t in ours]
    assert [json.loads(r["H-Params"]) for r in theirs] == [t["hparams"] for t in ours]
    assert [int(r["# of Batches"]) for r in theirs] == [t["totalBatchesProcessed"] for t in ours]


def test_validation_metrics_match_official_checkpoints(
    det: Det, official: Official, finished: int
) -> None:
    theirs = official.csv("experiment", "list-checkpoints", str(finished))
    assert len(theirs) == 6  # 3 trials x 2 checkpoints
    expected = {
        (int(r["Trial ID"]), int(r["# of Batches"])): float(r["Validation Metric"]) for r in theirs
    }
    ours: dict[tuple[int, int], float] = {}
    for t in ours_describe(det, finished)["trials"]:
        body = det.ok("trial", "describe", str(t["id"]), "--json").json()
        for w in body["workloads"]:
            if "validation" in w:
                v = w["validation"]
                ours[(t["id"], v["totalBatches"])] = v["metrics"]["avgMetrics"]["validation_loss"]
    assert ours == expected
    ours_ck = det.ok("checkpoint", "list", str(finished), "--json").json()
    assert sorted(c["uuid"] for c in ours_ck) == sorted(r["UUID"] for r in theirs)


def test_trial_describe_json_matches(det: Det, official: Official, finished: int) -> None:
    for t in ours_describe(det, finished)["trials"]:
        theirs = json.loads(official("trial", "describe", str(t["id"]), "--json"))
        ours = det.ok("trial", "describe", str(t["id"]), "--json").json()
        for key in ("id", "state", "hparams", "totalBatchesProcessed", "experimentId"):
            assert ours["trial"][key] == theirs["trial"][key], key

        def validations(body: dict[str, Any]) -> list[tuple[int, Any]]:
            return [
                (w["validation"]["totalBatches"], w["validation"]["metrics"]["avgMetrics"])
                for w in body["workloads"]
                if w.get("validation")
            ]

        assert validations(ours) == validations(theirs)


@pytest.fixture(scope="module")
def changed(cli_master: Master, sim_agents: object) -> Iterator[int]:
    """A finished experiment of its own, for the tests that change one."""
    eid = cli_support.create_via_api(cli_master, sim_config("to-change", trials=1))
    cli_support.wait(lambda: exp_state(cli_master, eid) == "STATE_COMPLETED", 90, "completion")
    yield eid


def official_experiment(official: Official, eid: int) -> dict[str, Any]:
    theirs = json.loads(official("experiment", "describe", str(eid), "--json"))
    assert isinstance(theirs, list) and len(theirs) == 1
    return dict(theirs[0]["experiment"])


def test_labels_set_by_either_cli_show_in_both(det: Det, official: Official, changed: int) -> None:
    det.login()
    official("experiment", "label", "add", str(changed), "from-official")
    det.ok("experiment", "label", "add", str(changed), "from-ours")
    ours = ours_describe(det, changed)["experiment"]
    theirs = official_experiment(official, changed)
    assert sorted(ours["labels"]) == sorted(theirs["labels"]) == ["from-official", "from-ours"]
    official("experiment", "label", "remove", str(changed), "from-ours")
    det.ok("experiment", "label", "remove", str(changed), "from-official")
    assert ours_describe(det, changed)["experiment"]["labels"] == []
    assert official_experiment(official, changed)["labels"] == []


def test_max_slots_set_by_either_cli_show_in_both(
    det: Det, official: Official, changed: int
) -> None:
    det.login()
    out = official("experiment", "set", "max-slots", str(changed), "2")
    assert f"Set `max_slots` of experiment {changed} to 2" in out
    assert ours_describe(det, changed)["experiment"]["config"]["resources"]["max_slots"] == 2
    det.ok("experiment", "set", "max-slots", str(changed), "4")
    assert official_experiment(official, changed)["config"]["resources"]["max_slots"] == 4
    assert ours_describe(det, changed)["config"]["resources"]["max_slots"] == 4


def _official_ids(official: Official, *args: str) -> list[int]:
    return [int(r["ID"]) for r in official.csv("experiment", "list", *args)]


def _our_ids(det: Det, *args: str) -> list[int]:
    return [e["id"] for e in det.ok("experiment", "list", "--json", *args).json()]


def test_archive_and_list_filters_agree(
    det: Det, official: Official, changed: int, finished: int
) -> None:
    det.login()
    for args in ((), ("--all",)):
        assert _our_ids(det, *args) == _official_ids(official, *args), args
    assert changed in _our_ids(det)
    det.ok("experiment", "archive", str(changed))
    assert official_experiment(official, changed)["archived"] is True
    for args in ((), ("--all",)):
        assert _our_ids(det, *args) == _official_ids(official, *args), args
    assert changed not in _official_ids(official) and changed in _official_ids(official, "--all")
    archived = {r["ID"]: r["Archived"] for r in official.csv("experiment", "list", "--all")}
    assert archived[str(changed)] == "True" and archived[str(finished)] == "False"
    official("experiment", "unarchive", str(changed))
    assert ours_describe(det, changed)["experiment"]["archived"] is False
    assert changed in _our_ids(det) and changed in _official_ids(official)


def test_move_by_either_cli_shows_in_both(
    det: Det, official: Official, changed: int, cli_master: Master
) -> None:
    ws = cli_master.post("/api/v1/workspaces", {"name": "moved-to"})["workspace"]
    project = cli_master.post(
        f"/api/v1/workspaces/{ws['id']}/projects", {"name": "target", "workspaceId": ws["id"]}
    )["project"]
    det.login()
    before = ours_describe(det, changed)["experiment"]["projectId"]
    official("experiment", "move", str(changed), "moved-to", "target")
    ours = ours_describe(det, changed)["experiment"]
    assert (ours["projectId"], ours["projectName"], ours["workspaceName"]) == (
        project["id"],
        "target",
        "moved-to",
    )
    det.ok("experiment", "move", str(changed), "Uncategorized", "Uncategorized")
    theirs = official_experiment(official, changed)
    assert theirs["projectId"] == before == 1
    assert theirs["workspaceName"] == "Uncategorized"


def test_gc_policy_set_by_ours_shows_in_theirs_and_collects(
    det: Det, official: Official, changed: int, cli_master: Master
) -> None:
    det.login()

    def kept() -> int:
        listed = cli_master.get(f"/api/v1/experiments/{changed}/checkpoints")["checkpoints"]
        return sum(c["state"] == "STATE_COMPLETED" for c in listed)

    cli_support.wait(lambda: kept() == 1, 60, "the default GC (best and latest kept)")
    refused = det("experiment", "set", "gc-policy", str(changed))
    assert refused.rc == 2 and "--save-trial-best" in refused.err, refused.err
    flags = ("--save-experiment-best", "0", "--save-trial-best", "0", "--save-trial-latest", "0")
    det.ok("experiment", "set", "gc-policy", str(changed), *flags)
    storage = official_experiment(official, changed)["config"]["checkpoint_storage"]
    assert (
        storage["save_experiment_best"],
        storage["save_trial_best"],
        storage["save_trial_latest"],
    ) == (0, 0, 0)
    cli_support.wait(lambda: kept() == 0, 60, "the GC under the new policy")


SINGLE = """
name: single-to-continue
entrypoint: python3 train.py
searcher: {name: single, metric: validation_loss, max_length: 4}
hyperparameters: {lr: 0.5}
"""


def test_official_continue_reopens_a_single_trial_experiment(
    det: Det, official: Official, finished: int, cli_master: Master
) -> None:
    det.login()
    eid = cli_support.create_via_api(cli_master, SINGLE)
    cli_support.wait(lambda: exp_state(cli_master, eid) == "STATE_COMPLETED", 90, "completion")
    (trial,) = cli_support.trials(cli_master, eid)
    out = official("experiment", "continue", str(eid), "--config", "searcher.max_length=8")
    assert f"Continued experiment {eid}" in out
    cli_support.wait(lambda: exp_state(cli_master, eid) == "STATE_COMPLETED", 90, "completion")
    ours = ours_describe(det, eid)
    assert [t["id"] for t in ours["trials"]] == [trial["id"]]
    assert ours["config"]["searcher"]["max_length"] in (8, {"batches": 8})
    assert official_experiment(official, eid)["state"] == "STATE_COMPLETED"
    # A multi-trial search is refused, in one line naming why.
    r = official.run("experiment", "continue", str(finished))
    assert r.returncode != 0 and "single" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_access_tokens_with_both_clis(det: Det, official: Official, cli_master: Master) -> None:
    import re

    import requests

    det.login()
    out = det.ok("token", "create", "-d", "for ci", "-e", "2").out
    token_id = int(re.search(r"TokenID: (\d+)", out).group(1))  # type: ignore[union-attr]
    token = re.search(r"Access-Token: (\S+)", out).group(1)  # type: ignore[union-attr]
    theirs = json.loads(official("token", "describe", str(token_id), "--json"))
    ours = det.ok("token", "describe", str(token_id), "--json").json()
    keys = ("id", "userId", "description", "createdAt", "expiry", "revoked")
    assert [{k: t.get(k) for k in keys} for t in ours] == [
        {k: t.get(k) for k in keys} for t in theirs
    ]
    assert theirs[0]["description"] == "for ci" and not theirs[0]["revoked"]
    # Two days, in Determined's form ("48h").
    created = dt.datetime.fromisoformat(theirs[0]["createdAt"].replace("Z", "+00:00"))
    expiry = dt.datetime.fromisoformat(theirs[0]["expiry"].replace("Z", "+00:00"))
    assert abs((expiry - created) - dt.timedelta(days=2)) < dt.timedelta(minutes=1)

    official("token", "edit", str(token_id), "-d", "renamed")
    assert (
        det.ok("token", "describe", str(token_id), "--json").json()[0]["description"] == "renamed"
    )
    assert det.ok("token", "login", token).out.strip() == "Authenticated as admin."
    assert str(token_id) in det.ok("token", "list").out

    det.ok("token", "revoke", str(token_id))
    me = requests.get(
        cli_master.url + "/api/v1/me", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    assert me.status_code == 401
    det.login()
    listed = {
        t["id"]: t for t in json.loads(official("token", "list", "--show-inactive", "--json"))
    }
    assert listed[token_id]["revoked"] is True
    assert token_id not in {t["id"] for t in det.ok("token", "list", "--json").json()}
    # Bad input is refused in one line, changing nothing.
    bad = det("token", "create", "-e", "0")
    assert bad.rc != 0 and "--expiration-days" in bad.err
    assert det("token", "describe", "999999").rc != 0


# --- Issue 38 item 8: the verbs det's CLI lacked, beside the official client's --------------------


def _one_line(err: str) -> bool:
    """A refusal: one ``det: error:`` line, or argparse's usage and its one error line."""
    lines = err.strip().splitlines()
    return "Traceback" not in err and (len(lines) == 1 or lines[-1].startswith("det "))


def _official_usernames(official: Official, *args: str) -> set[str]:
    rows = [line.split("|") for line in official("user", "list", *args).splitlines()]
    return {r[1].strip() for r in rows if len(r) > 2}


def test_user_activate_deactivate_and_edit_as_the_official_cli(
    det: Det, official: Official, cli_master: Master
) -> None:
    det.login()
    cli_master.post(
        "/api/v1/users",
        {"user": {"username": "edited", "admin": False, "active": True}, "password": "Pw-1edited"},
    )

    def user(name: str = "edited") -> dict[str, Any]:
        return dict(cli_master.get(f"/api/v1/users/{name}/by-username")["user"])

    assert det.ok("user", "deactivate", "edited").out.strip() == "deactivated user edited"
    assert user()["active"] is False
    assert "edited" not in _official_usernames(official)
    assert "edited" in _official_usernames(official, "--all")
    official("user", "activate", "edited")
    assert user()["active"] is True
    official("user", "deactivate", "edited")
    det.ok("user", "activate", "edited")
    assert user()["active"] is True and "edited" in _official_usernames(official)

    ours = det.ok("user", "edit", "edited", "--display-name", "Ed Itor", "--admin", "true").out
    assert (user()["displayName"], user()["admin"]) == ("Ed Itor", True)
    theirs = official("user", "edit", "edited", "--display-name", "Ed Two", "--admin", "false")
    assert (user()["displayName"], user()["admin"]) == ("Ed Two", False)
    assert ours == theirs == "Changes made to the following fields: Display Name, Admin\n"
    out = det.ok(
        "user", "edit", "edited", "--username", "edited2", "--active", "false", "--remote", "false"
    ).out
    assert out == "Changes made to the following fields: Remote, Active, Username\n"
    assert (user("edited2")["active"], user("edited2")["remote"]) == (False, False)
    official("user", "edit", "edited2", "--username", "edited", "--active", "true")
    before = user()
    assert before["active"] is True

    # Bad input: one line naming what is wrong; the user is unchanged.
    for args, rc, named in (
        (("edit", "edited"), 2, "--display-name"),
        (("edit", "edited", "--admin", "maybe"), 2, "--admin"),
        (("edit", "edited", "--active"), 2, "--active"),
        (("edit", "no-such-user", "--admin", "true"), 1, "no-such-user"),
        (("deactivate", "no-such-user"), 1, "no-such-user"),
        (("activate",), 2, "username"),
    ):
        r = det("user", *args)
        assert r.rc == rc and named in r.err and _one_line(r.err), (args, r.rc, r.err)
    assert user() == before


def test_workspace_list_pools_as_the_official_cli(
    det: Det, official: Official, cli_master: Master
) -> None:
    det.login()
    ws = cli_master.post("/api/v1/workspaces", {"name": "pools-listed"})["workspace"]
    pools = cli_master.get(f"/api/v1/workspaces/{ws['id']}/available-resource-pools")[
        "resourcePools"
    ]
    assert pools  # the cluster's pool, bound to no workspace
    theirs = official("workspace", "list-pools", "pools-listed")
    ours = det.ok("workspace", "list-pools", "pools-listed").out
    for text in (ours, theirs):
        assert "Available Resource Pools" in text
        assert any(
            "pools-listed" in line and ", ".join(pools) in line for line in text.splitlines()
        )
    assert det.ok("w", "list-pools", "pools-listed", "--json").json() == pools
    r = det("workspace", "list-pools", "no-such-workspace")
    assert r.rc == 1 and "no-such-workspace" in r.err and _one_line(r.err)


def test_workspace_members_template_config_and_tb_files_as_the_official_cli(
    det: Det, official: Official, cli_master: Master, finished: int, tmp_path: Path
) -> None:
    det.login()
    # det workspace list-members: a Viewer assigned by det's CLI, listed by both.
    cli_master.post("/api/v1/workspaces", {"name": "with-members"})
    cli_master.post(
        "/api/v1/users",
        {"user": {"username": "member", "admin": False, "active": True}, "password": "Pw-1member"},
    )
    det.ok(
        "rbac", "assign-role", "Viewer", "--username-to-assign", "member",
        "--workspace-name", "with-members",
    )  # fmt: skip
    ours = list(csv.reader(io.StringIO(det.ok("w", "list-members", "with-members", "--csv").out)))
    theirs = list(
        csv.reader(io.StringIO(official("workspace", "list-members", "with-members", "--csv")))
    )
    assert (
        ours
        == theirs
        == [["User/Group Name", "User/Group", "Role Name"], ["member", "U", "Viewer"]]
    )
    our_json = _no_nulls(det.ok("w", "list-members", "with-members", "--json").json())
    their_json = _no_nulls(
        json.loads(official("workspace", "list-members", "with-members", "--json"))
    )
    assert our_json["assignments"] == their_json["assignments"]
    assert yaml.safe_load(det.ok("w", "list-members", "with-members", "--yaml").out) == (
        det.ok("w", "list-members", "with-members", "--json").json()
    )
    r = det("workspace", "list-members", "no-such-workspace")
    assert r.rc == 1 and "no-such-workspace" in r.err and _one_line(r.err), r.err

    # det template set-value config: ours sets, the official reads, and back.
    cli_master.post("/api/v1/templates/valued", {"name": "valued", "config": {"description": "a"}})
    mine = tmp_path / "mine.yaml"
    mine.write_text("description: from ours\nresources: {slots_per_trial: 2}\n")
    out = det.ok("template", "set-value", "config", "valued", str(mine)).out
    assert out == "Updated template valued\n"
    assert yaml.safe_load(official("template", "describe", "valued")) == yaml.safe_load(
        mine.read_text()
    )
    theirs_file = tmp_path / "theirs.yaml"
    theirs_file.write_text("description: from the official\n")
    official("template", "set-value", "config", "valued", str(theirs_file))
    assert yaml.safe_load(det.ok("template", "describe", "valued").out) == {
        "description": "from the official"
    }
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    for args, rc, named in (
        (("no-such-template", str(mine)), 1, "no-such-template"),
        (("valued", str(bad)), 2, "bad.yaml"),
        (("valued", str(tmp_path / "missing.yaml")), 2, "missing.yaml"),
    ):
        r = det("template", "set-value", "config", *args)
        assert r.rc == rc and named in r.err and _one_line(r.err), (args, r.err)
    assert yaml.safe_load(det.ok("template", "describe", "valued").out) == {
        "description": "from the official"
    }

    # det experiment delete-tb-files: both CLIs exit 0; an unknown experiment is one line.
    out = det.ok("experiment", "delete-tb-files", str(finished)).out
    assert out == f"Deleted the TensorBoard files of experiment {finished}\n"
    official("experiment", "delete-tb-files", str(finished))
    r = det("experiment", "delete-tb-files", "999999")
    assert r.rc == 1 and "999999" in r.err and _one_line(r.err), r.err


BUNDLE_FILES = {
    "trial_logs.txt",
    "master_logs.txt",
    "api_trial_call.json",
    "api_experiment_call.json",
}


def _bundle(folder: Path, trial_id: int) -> dict[str, bytes]:
    """The one bundle in ``folder``: its members by name, after checking the archive's name and
    its one top folder (the archive's name without .tar.gz)."""
    (path,) = list(folder.iterdir())
    assert re.fullmatch(rf"det-bundle-trial-{trial_id}-\d{{8}}T\d{{6}}\.tar\.gz", path.name), path
    top = path.name.removesuffix(".tar.gz")
    with tarfile.open(path) as tf:
        files = [m for m in tf.getmembers() if m.isfile()]
        assert {m.name.partition("/")[0] for m in files} == {top}
        return {m.name.partition("/")[2]: tf.extractfile(m).read() for m in files}  # type: ignore[union-attr]


def _no_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _no_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_nulls(v) for v in value]
    return value


def test_trial_support_bundle_as_the_official_cli(
    det: Det, official: Official, finished: int, cli_master: Master, tmp_path: Path
) -> None:
    det.login()
    tid = ours_describe(det, finished)["trials"][0]["id"]
    bundles = {}
    for who, run in (("ours", lambda *a: det.ok(*a).out), ("official", official)):
        (tmp_path / who).mkdir()
        out = run("trial", "support-bundle", str(tid), "-o", str(tmp_path / who))
        assert out.startswith(f"bundle path: {tmp_path / who}/det-bundle-trial-{tid}-"), out
        bundles[who] = _bundle(tmp_path / who, tid)
    ours, theirs = bundles["ours"], bundles["official"]
    assert set(ours) == set(theirs) == BUNDLE_FILES
    for b in (ours, theirs):
        assert json.loads(b["api_trial_call.json"])["id"] == tid
        assert json.loads(b["api_experiment_call.json"])["experiment"]["id"] == finished
        assert f"trial {tid} step 1".encode() in b["trial_logs.txt"]
        assert b["master_logs.txt"].strip()
    assert ours["trial_logs.txt"] == theirs["trial_logs.txt"]
    # The official client writes its bindings' nulls (batchMetrics: null) and only the fields
    # its bindings know (not det's latestCheckpointUuid); those agree.
    our_trial = _no_nulls(json.loads(ours["api_trial_call.json"]))
    their_trial = _no_nulls(json.loads(theirs["api_trial_call.json"]))
    assert {k: our_trial.get(k) for k in their_trial} == their_trial

    # A user who may read the trial but not the master's logs (admins only) gets the rest.
    cli_master.post(
        "/api/v1/users",
        {"user": {"username": "bundler", "admin": False, "active": True}, "password": "Pw-1bundle"},
    )
    det.login("bundler", "Pw-1bundle")
    (tmp_path / "user").mkdir()
    r = det.ok("trial", "support-bundle", str(tid), "-o", str(tmp_path / "user"))
    assert "no master logs" in r.err
    user_bundle = _bundle(tmp_path / "user", tid)
    assert set(user_bundle) == BUNDLE_FILES
    assert b"not included" in user_bundle["master_logs.txt"]
    assert user_bundle["trial_logs.txt"] == ours["trial_logs.txt"]
    det.login()

    # Bad input: one line, and no archive (not even a part of one) is left behind.
    empty = tmp_path / "empty"
    empty.mkdir()
    for args, rc, named in (
        (("999999", "-o", str(empty)), 1, "999999"),
        ((str(tid), "-o", str(tmp_path / "missing")), 2, "missing"),
        (("not-a-trial",), 2, "trial_id"),
    ):
        r = det("trial", "support-bundle", *args)
        assert r.rc == rc and named in r.err and _one_line(r.err), (args, r.rc, r.err)
    assert list(empty.iterdir()) == [] and not (tmp_path / "missing").exists()


def _job_priority(cli_master: Master, kind: str, task_id: str) -> int:
    job = cli_master.get(f"/api/v1/{kind}s/{task_id}")[kind]["jobId"]
    jobs = cli_master.get("/api/v1/job-queues-v2")["jobs"]
    (priority,) = [j["full"]["priority"] for j in jobs if j["full"]["jobId"] == job]
    return int(priority)


def test_interactive_task_verbs_as_the_official_cli(
    det: Det, official: Official, cli_master: Master, finished: int
) -> None:
    det.login()
    # The tasks wait in the queue (its jobs list shows their priority) while the agents are
    # disabled: a SimAgent would end each at once, and an ended task's job leaves the queue.
    agents = [a["id"] for a in cli_master.get("/api/v1/agents")["agents"]]
    for agent in agents:
        cli_master.post(f"/api/v1/agents/{agent}/disable", {"drain": False})
    launched = {
        kind: str(cli_master.post(f"/api/v1/{kind}s", body)[kind]["id"])
        for kind, body in (
            ("command", {"config": {"entrypoint": ["sleep", "600"]}}),
            ("notebook", {}),
            ("shell", {}),
            ("tensorboard", {"experimentIds": [finished]}),
        )
    }
    noun = {
        "command": "cmd",
        "notebook": "notebook",
        "shell": "shell",
        "tensorboard": "tensorboard",
    }
    try:
        for kind, tid in launched.items():
            ours = det.ok(noun[kind], "set", "priority", tid, "7").out
            assert ours == f"Set priority of {kind} {tid} to 7\n"
            assert _job_priority(cli_master, kind, tid) == 7
            theirs = official(kind, "set", "priority", tid, "9")
            assert theirs == f"Set priority of {kind} {tid} to 9\n"
            assert _job_priority(cli_master, kind, tid) == 9
            # Bad input: one line naming it; the priority stays.
            for args, rc, named in (
                ((tid, "0"), 1, "priority"),
                ((tid, "high"), 2, "priority"),
                (("no-such-task", "5"), 1, "no-such-task"),
            ):
                r = det(noun[kind], "set", "priority", *args)
                assert r.rc == rc and named in r.err and _one_line(r.err), (kind, args, r.err)
            assert _job_priority(cli_master, kind, tid) == 9
            # det <kind> config, as the official prints it (YAML of the same config).
            ours_config = yaml.safe_load(det.ok(noun[kind], "config", tid).out)
            assert ours_config == yaml.safe_load(official(kind, "config", tid)), kind
            assert "resources" in ours_config
            r = det(noun[kind], "config", "no-such-task")
            assert r.rc == 1 and "no-such-task" in r.err and _one_line(r.err), r.err
        # det command describe and det shell logs, beside the official's.
        cmd = launched["command"]
        ours_cmd = det.ok("cmd", "describe", cmd, "--json").json()
        assert ours_cmd == json.loads(official("command", "describe", cmd, "--json"))
        assert ours_cmd["state"] == "QUEUED" and ours_cmd["id"] == cmd
        (row,) = csv.DictReader(io.StringIO(det.ok("cmd", "describe", cmd, "--csv").out))
        assert (row["id"], row["state"], row["username"]) == (cmd, "QUEUED", "admin")
        shell = launched["shell"]
        theirs_logs = official("shell", "logs", shell).splitlines(keepends=True)
        # The official adds a last line of its own ("Task log stream ended. To reopen ...").
        assert theirs_logs[-1].startswith("Task log stream ended")
        assert det.ok("shell", "logs", shell).out == "".join(theirs_logs[:-1])
        r = det("cmd", "describe", "no-such-task")
        assert r.rc == 1 and "no-such-task" in r.err and _one_line(r.err), r.err
    finally:
        for kind, tid in launched.items():
            cli_master.post(f"/api/v1/{kind}s/{tid}/kill")
        for agent in agents:
            cli_master.post(f"/api/v1/agents/{agent}/enable")


ITEM_8 = (
    "workspace list-members",
    "template set-value config",
    "experiment delete-tb-files",
    "command config",
    "command describe",
    "notebook config",
    "shell config",
    "shell logs",
    "user activate",
    "user deactivate",
    "user edit",
    "model list-versions",
    "command set priority",
    "notebook set priority",
    "shell set priority",
    "tensorboard set priority",
    "experiment download",
    "trial support-bundle",
    "workspace list-pools",
)


def test_det_cli_has_the_official_verbs_issue_38_named() -> None:
    """The leaves docs/compatibility.md marks 'has' for det's CLI, read from its parser (the
    tests above run each one)."""
    assert [leaf for leaf in ITEM_8 if not cli_support.det_cli_has(leaf)] == []
    assert not cli_support.det_cli_has("experiment no-such-verb")
