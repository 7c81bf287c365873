"""The official ``determined==0.38.1`` CLI and SDK get the right answer from det's master (issue 12:
sorted checkpoints and trials, log filters, validation metrics, agents, master logs, the trial's
summary fields, the version check), and our own ``det`` shows the same answers.

Every answer the official package parses goes through its own generated bindings (in its venv)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import re
import subprocess
import textwrap
import typing
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from det.master.schemas import d
from tests.compat.official import ensure_official_venv
from tests.compat.official_cli import OfficialDet
from tests.integration import cli_support
from tests.integration.cli_support import Det, exp_state, sim_config, trials
from tests.integration.conftest import ADMIN_PASSWORD, Master, MasterClient
from tests.integration.test_preview_search import CONFIG as PREVIEW_CONFIG
from tests.integration.test_preview_search import preview

pytestmark = pytest.mark.integration
cli_master = cli_support.threaded_cli_master
det = cli_support.det
sim_agents = cli_support.sim_agents


class Official:
    """The official ``det`` CLI and Python, logged in as admin, against one master."""

    def __init__(self, bin_dir: Path, master: MasterClient, home: Path) -> None:
        self.bin_dir = bin_dir
        self.master = master
        self.home = home
        self.env = {
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "HOME": str(home),
            "DET_MASTER": master.url,
        }
        # A fork server (tests/compat/official_cli.py), its files in the client's home.
        self.det = OfficialDet(bin_dir, self.env, scratch=home)

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.det.run(args, stdin, timeout=120)

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        r = self.run(*args, stdin=stdin)
        assert r.returncode == 0, (
            f"official det {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}"
        )
        return r.stdout

    def csv(self, *args: str) -> list[dict[str, str]]:
        return list(csv.DictReader(io.StringIO(self(*args, "--csv"))))

    def python(self, body: str) -> Any:
        """Runs ``body`` with the official SDK logged in as ``client`` (and ``bindings``,
        ``session``); the script prints one JSON value, which is returned."""
        script = (
            "import json, warnings\n"
            "warnings.simplefilter('ignore')\n"
            "from determined.experimental import client\n"
            "from determined.common.api import bindings\n"
            f"client.login(master={self.master.url!r}, user='admin', password={ADMIN_PASSWORD!r})\n"
            "session = client._determined._session\n" + textwrap.dedent(body)
        )
        r = subprocess.run(
            [str(self.bin_dir / "python"), "-c", script],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
        )
        assert r.returncode == 0, f"official SDK script failed:\n{r.stdout}\n{r.stderr}"
        return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def official(cli_master: Master, tmp_path_factory: pytest.TempPathFactory) -> Official:
    o = Official(ensure_official_venv(), cli_master, tmp_path_factory.mktemp("official-home"))
    o("user", "login", "admin", stdin=ADMIN_PASSWORD + "\n")
    return o


@pytest.fixture(scope="module")
def finished(cli_master: Master, sim_agents: object) -> Iterator[int]:
    """Three trials of a random search (validation_loss = lr / (step + 1): the trial with the
    smallest lr is best), each with two checkpoints and validations."""
    eid = cli_support.create_via_api(cli_master, sim_config("answers", trials=3))
    cli_support.wait(lambda: exp_state(cli_master, eid) == "STATE_COMPLETED", 90, "completion")

    # The checkpoint GC runs after completion; the tests compare lists taken at different
    # moments, so they start once it is done. Each trial's later checkpoint is both its best
    # (loss = lr / (step + 1)) and its latest: the GC deletes the three earlier ones.
    def collected() -> bool:
        states = [c["state"] for c in _checkpoints(cli_master, eid)]
        return states.count("STATE_DELETED") == 3

    cli_support.wait(collected, 90, "the checkpoint GC")
    yield eid


def _checkpoints(master: Master, eid: int) -> list[dict[str, Any]]:
    return list(master.get(f"/api/v1/experiments/{eid}/checkpoints")["checkpoints"])


def _loss(c: dict[str, Any]) -> float:
    return float(c["training"]["validationMetrics"]["avgMetrics"]["validation_loss"])


def _best_uuid(master: Master, eid: int) -> str:
    ckpts = _checkpoints(master, eid)
    assert len(ckpts) == 6
    best = min(ckpts, key=_loss)
    # The fixture is only a test of sorting if the best is not what an unsorted list starts with.
    assert best["uuid"] != ckpts[0]["uuid"]
    return str(best["uuid"])


def test_sdk_top_checkpoint_and_sorted_list_return_the_best(
    cli_master: Master, official: Official, finished: int
) -> None:
    best = _best_uuid(cli_master, finished)
    got = official.python(
        f"""
        exp = client.get_experiment({finished})
        top = exp.top_checkpoint().uuid
        asc = [c.uuid for c in exp.list_checkpoints(
            sort_by=client.CheckpointSortBy.SEARCHER_METRIC, order_by=client.OrderBy.ASC,
            max_results=1)]
        desc = [c.uuid for c in exp.list_checkpoints(
            sort_by="validation_loss", order_by=client.OrderBy.DESC)]
        print(json.dumps({{"top": top, "asc": asc, "desc": desc}}))
        """
    )
    # The SDK asks for completed checkpoints only (the GC deleted the others).
    ordered = sorted(
        (c for c in _checkpoints(cli_master, finished) if c["state"] == "STATE_COMPLETED"),
        key=_loss,
    )
    assert len(ordered) >= 3
    assert got["top"] == best
    assert got["asc"] == [best]
    assert got["desc"] == [c["uuid"] for c in reversed(ordered)]


def test_cli_best_checkpoints_and_download_top_n(
    cli_master: Master, official: Official, det: Det, finished: int, tmp_path: Path
) -> None:
    best = _best_uuid(cli_master, finished)
    rows = official.csv("experiment", "list-checkpoints", str(finished), "--best", "1")
    assert [r["UUID"] for r in rows] == [best]
    out = tmp_path / "dl"
    # Checkpoint files are not on this machine: the download fails after picking the checkpoint,
    # so what it picked is named in its error or its output.
    r = official.run(
        "experiment", "download", str(finished), "--top-n", "1", "-o", str(out), "--quiet"
    )
    others = {c["uuid"] for c in _checkpoints(cli_master, finished)} - {best}
    text = r.stdout + r.stderr
    assert best in text or (out / best).exists(), text
    assert not any(u in text for u in others), text

    det.login()
    ours = det.ok("checkpoint", "list", str(finished), "--best", "1", "--json").json()
    assert [c["uuid"] for c in ours] == [best]


def test_list_trials_honours_sort_and_order(
    cli_master: Master, official: Official, finished: int
) -> None:
    got = official.python(
        f"""
        exp = client.get_experiment({finished})
        desc = [t.id for t in exp.list_trials(
            sort_by=client.TrialSortBy.ID, order_by=client.OrderBy.DESC)]
        asc = [t.id for t in exp.list_trials(
            sort_by=client.TrialSortBy.ID, order_by=client.OrderBy.ASC)]
        best = [t.id for t in exp.list_trials(
            sort_by=client.TrialSortBy.BEST_VALIDATION_METRIC, order_by=client.OrderBy.ASC)]
        print(json.dumps({{"desc": desc, "asc": asc, "best": best}}))
        """
    )
    ids = sorted(t["id"] for t in trials(cli_master, finished))
    assert got["asc"] == ids
    assert got["desc"] == ids[::-1]
    by_lr = sorted(trials(cli_master, finished), key=lambda t: t["hparams"]["lr"])
    assert got["best"] == [t["id"] for t in by_lr]


def _post_logs(master: Master, task_id: str, entries: list[tuple[str, str, str]]) -> None:
    r = requests.post(
        f"{master.url}/api/v1/task/logs",
        json={
            "logs": [
                {
                    "taskId": task_id,
                    "allocationId": f"{task_id}.1",
                    "agentId": "sim-0",
                    "containerId": "sim",
                    "rankId": None,
                    "log": line + "\n",
                    "stdtype": "stdout",
                    "source": "container",
                    "level": level,
                    "timestamp": when,
                }
                for line, level, when in entries
            ]
        },
        headers={"Authorization": f"Bearer {master.agent_token}"},
        timeout=10,
    )
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def logged_trial(cli_master: Master, finished: int) -> dict[str, Any]:
    """A trial of the finished experiment whose log holds the simulated agent's 4 lines and
    then 8 more, one an ERROR, an hour apart from 2030-01-01T00:00Z."""
    trial = trials(cli_master, finished)[0]
    base = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    entries = [
        (
            f"extra {i}",
            "LOG_LEVEL_ERROR" if i == 6 else "LOG_LEVEL_INFO",
            (base + dt.timedelta(hours=i)).isoformat().replace("+00:00", "Z"),
        )
        for i in range(8)
    ]
    _post_logs(cli_master, trial["taskId"], entries)
    return dict(trial)


def _lines(text: str) -> list[str]:
    """The log lines printed, without the official CLI's closing "Trial log stream ended" note."""
    return [
        line
        for line in text.splitlines()
        if line.strip() and not line.startswith("Trial log stream ended")
    ]


def test_trial_logs_head_tail_level_and_time_filters(
    official: Official, det: Det, logged_trial: dict[str, Any]
) -> None:
    tid = str(logged_trial["id"])
    everything = _lines(official("trial", "logs", tid))
    assert everything[-8:] == [f"extra {i}" for i in range(8)]
    assert len(everything) >= 12
    cases: list[tuple[list[str], list[str]]] = [
        (["--head", "3"], everything[:3]),
        (["--tail", "5"], everything[-5:]),
        (["--level", "ERROR"], ["extra 6"]),
        (
            [
                "--timestamp-after",
                "2030-01-01T01:30:00Z",
                "--timestamp-before",
                "2030-01-01T04:30:00Z",
            ],
            ["extra 2", "extra 3", "extra 4"],
        ),
    ]
    det.login()
    for flags, expected in cases:
        assert _lines(official("trial", "logs", tid, *flags)) == expected, flags
        # Ours shows a worker's rank as a "[rank=N] " prefix, as the agent received it.
        ours = [
            re.sub(r"^\[rank=\d+\] ", "", x)
            for x in _lines(det.ok("trial", "logs", tid, *flags).out)
        ]
        assert ours == expected, flags


def test_bad_log_filters_are_refused_with_the_field(
    cli_master: Master, logged_trial: dict[str, Any]
) -> None:
    for params, field in (
        ({"timestampAfter": "yesterday"}, "timestampAfter"),
        ({"levels": "LOUD"}, "levels"),
        ({"orderBy": "SIDEWAYS"}, "orderBy"),
    ):
        r = requests.get(
            f"{cli_master.url}/api/v1/trials/{logged_trial['id']}/logs",
            params=params,
            headers={"Authorization": f"Bearer {cli_master.token}"},
            timeout=10,
        )
        assert r.status_code == 400, r.text
        assert field in r.text


def test_sdk_validation_metrics_streams(
    cli_master: Master, official: Official, finished: int
) -> None:
    tids = sorted(t["id"] for t in trials(cli_master, finished))
    got = official.python(
        f"""
        t = client.get_trial({tids[0]})
        it = [(m.steps_completed, m.metrics["validation_loss"])
              for m in t.iter_metrics("validation")]
        train = [m.steps_completed for m in t.iter_metrics("training")]
        old = [(m.steps_completed, m.metrics["validation_loss"])
               for m in t.stream_validation_metrics()]
        many = sorted((m.trial_id, m.steps_completed)
                      for m in client.stream_trials_validation_metrics({tids}))
        print(json.dumps({{"it": it, "old": old, "many": many, "train": train}}))
        """
    )
    trial = cli_master.get(f"/api/v1/trials/{tids[0]}")["trial"]
    lr = trial["hparams"]["lr"]
    expected = [[2, lr / 3], [4, lr / 5]]
    assert got["it"] == expected
    assert got["old"] == expected
    assert got["train"] == [1, 2, 3, 4]
    assert got["many"] == [[tid, step] for tid in tids for step in (2, 4)]


def test_trial_carries_best_and_latest_validation_and_checkpoints(
    cli_master: Master, official: Official, finished: int
) -> None:
    tid = trials(cli_master, finished)[0]["id"]
    got = official.python(
        f"""
        r = bindings.get_GetTrial(session, trialId={tid}).trial
        print(json.dumps({{
            "best": r.bestValidation.metrics.avgMetrics["validation_loss"],
            "bestBatches": r.bestValidation.totalBatches,
            "latest": r.latestValidation.totalBatches,
            "ckpt": r.bestCheckpoint.uuid,
            "ckptBatches": r.bestCheckpoint.totalBatches,
            "count": r.checkpointCount,
            "size": r.totalCheckpointSize,
        }}))
        """
    )
    ckpts = cli_master.get(f"/api/v1/trials/{tid}/checkpoints")["checkpoints"]
    best = min(ckpts, key=_loss)
    assert got["best"] == _loss(best)
    assert got["bestBatches"] == 4 and got["latest"] == 4
    assert got["ckpt"] == best["uuid"] and got["ckptBatches"] == 4
    completed = [c for c in ckpts if c["state"] == "STATE_COMPLETED"]  # the GC keeps the best
    assert best in completed
    assert got["count"] == len(completed) and got["size"] == str(10 * len(completed))


def test_agent_list_and_enable_disable_all(
    cli_master: Master, official: Official, finished: int
) -> None:
    rows = official.csv("agent", "list")
    assert sorted(r["Agent ID"] for r in rows) == ["sim-0", "sim-1"]
    assert all(r["Slots"] == "2" for r in rows)
    official("agent", "disable", "--all")
    agents = cli_master.get("/api/v1/agents")["agents"]
    assert [a["enabled"] for a in agents] == [False, False]
    official("agent", "enable", "--all")
    agents = cli_master.get("/api/v1/agents")["agents"]
    assert [a["enabled"] for a in agents] == [True, True]
    stats = official.python(
        """
        a = bindings.get_GetAgents(session).agents[0]
        print(json.dumps({k: v.total for k, v in a.slotStats.typeStats.items()}))
        """
    )
    assert stats == {"TYPE_CPU": 2}


def test_master_logs_stream(cli_master: Master, official: Official, det: Det) -> None:
    out = _lines(official("master", "logs", "--tail", "5"))
    assert 1 <= len(out) <= 5
    det.login()
    ours = _lines(det.ok("master", "logs", "--tail", "5").out)
    assert 1 <= len(ours) <= 5


def test_no_version_warning_and_det_version_shows_both(
    cli_master: Master, official: Official, det: Det
) -> None:
    r = official.run("master", "info")
    assert r.returncode == 0, r.stderr
    assert "less than CLI version" not in r.stderr
    info = requests.get(f"{cli_master.url}/info", timeout=10).json()
    assert info["version"] == "0.38.1"
    import det as det_pkg

    assert info["detVersion"] == det_pkg.__version__
    shown = det.ok("version", "--json").json()
    assert shown["Determined API"] == "0.38.1"
    assert shown["master"] == det_pkg.__version__


def test_user_rename_and_edit_take_effect_and_agent_user_link_is_stored(
    cli_master: Master, official: Official, det: Det
) -> None:
    def names() -> list[str]:
        return [u["username"] for u in cli_master.get("/api/v1/users")["users"]]

    official("user", "create", "renamee", "--password", "Renamee-pw-1")
    official("user", "rename", "renamee", "renamed")
    assert "renamed" in names() and "renamee" not in names()
    official("user", "edit", "renamed", "--username", "edited")
    assert "edited" in names() and "renamed" not in names()
    det.login()
    det.ok("user", "rename", "edited", "ours")
    assert "ours" in names() and "edited" not in names()

    bad = official.run("user", "rename", "ours", "has space")
    assert bad.returncode != 0 and "username" in bad.stderr, bad.stderr
    taken = official.run("user", "rename", "ours", "admin")
    assert taken.returncode != 0 and "already exists" in taken.stderr, taken.stderr
    assert "ours" in names()

    link = official.run(
        "user",
        "link-with-agent-user",
        "ours",
        "--agent-uid",
        "1000",
        "--agent-gid",
        "1000",
        "--agent-user",
        "u",
        "--agent-group",
        "g",
    )
    assert link.returncode == 0, link.stderr
    got = cli_master.get("/api/v1/users/ours/by-username")["user"]["agentUserGroup"]
    assert got == {"agentUid": 1000, "agentGid": 1000, "agentUser": "u", "agentGroup": "g"}


def test_set_gc_policy_collects_again_and_max_slots_is_stored(
    cli_master: Master, official: Official, sim_agents: object
) -> None:
    eid = cli_support.create_via_api(cli_master, sim_config("gc-policy", trials=1))
    cli_support.wait(lambda: exp_state(cli_master, eid) == "STATE_COMPLETED", 90, "completion")

    def completed() -> int:
        return sum(c["state"] == "STATE_COMPLETED" for c in _checkpoints(cli_master, eid))

    cli_support.wait(lambda: completed() == 1, 60, "the default GC (best and latest kept)")
    official(
        "experiment",
        "set",
        "gc-policy",
        str(eid),
        "--save-experiment-best",
        "0",
        "--save-trial-best",
        "0",
        "--save-trial-latest",
        "0",
        "--yes",
    )
    storage = cli_master.get(f"/api/v1/experiments/{eid}")["config"]["checkpoint_storage"]
    assert (storage["save_trial_best"], storage["save_trial_latest"]) == (0, 0)
    cli_support.wait(lambda: completed() == 0, 60, "the GC under the new policy")

    r = official.run("experiment", "set", "max-slots", str(eid), "2")
    assert r.returncode == 0, r.stderr
    assert f"Set `max_slots` of experiment {eid} to 2" in r.stdout
    assert cli_master.get(f"/api/v1/experiments/{eid}")["config"]["resources"]["max_slots"] == 2


def test_sdk_download_through_the_master_returns_the_checkpoints_files(
    cli_master: Master, official: Official, finished: int, tmp_path: Path
) -> None:
    """``Checkpoint.download(mode=DownloadMode.MASTER)``: the official SDK reads the checkpoint
    as a tar stream from the master (GET /checkpoints/UUID) and unpacks every file as stored."""
    best = _best_uuid(cli_master, finished)
    # The simulated trials wrote no files: put some where the master's shared_fs storage is.
    stored = cli_master.data_dir.parent / "checkpoints" / best
    files = {"model.pt": b"weights\x00\xff", "state/optimizer.json": b'{"lr": 0.1}', "e": b""}
    for name, data in files.items():
        (stored / name).parent.mkdir(parents=True, exist_ok=True)
        (stored / name).write_bytes(data)
    out = tmp_path / "dl"
    official.python(
        f"""
        from determined.common.experimental import checkpoint
        ck = client.get_checkpoint({best!r})
        ck.download(path={str(out)!r}, mode=checkpoint.DownloadMode.MASTER)
        print(json.dumps(ck.uuid))
        """
    )
    got = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert {k: v for k, v in got.items() if k != "metadata.json"} == files


def test_experiment_list_honours_sort_and_every_filter(
    cli_master: Master, official: Official
) -> None:
    """GetExperiments: sortBy, orderBy, description, labels, userIds and experimentIdFilter
    (they were ignored: a filtered list answered every experiment, silently)."""
    made: dict[str, int] = {}
    for name, description, labels in (
        ("lst-b", "alpha run", ["x", "y"]),
        ("lst-a", "beta run", ["x"]),
        ("lst-c", "alpha two", []),
    ):
        config = sim_config(name, trials=1) + f"description: {description}\nlabels: {labels}\n"
        made[name] = cli_support.create_via_api(cli_master, config, activate=False)
    ids = sorted(made.values())
    window = {"experimentIdFilter.gte": ids[0], "experimentIdFilter.lte": ids[-1]}

    def names(**params: Any) -> list[str]:
        body = cli_master.get("/api/v1/experiments", params={**window, **params})
        return [e["name"] for e in body["experiments"]]

    assert names() == ["lst-b", "lst-a", "lst-c"]  # by id
    assert names(sortBy="SORT_BY_NAME") == ["lst-a", "lst-b", "lst-c"]
    assert names(sortBy="SORT_BY_NAME", orderBy="ORDER_BY_DESC") == ["lst-c", "lst-b", "lst-a"]
    assert names(sortBy="SORT_BY_DESCRIPTION") == [
        "lst-b",
        "lst-c",
        "lst-a",
    ]  # alpha r, alpha t, beta
    for key in typing.get_args(d.v1GetExperimentsRequestSortBy):  # every key Determined has
        assert sorted(names(sortBy=key)) == ["lst-a", "lst-b", "lst-c"], key
    assert names(description="alpha") == ["lst-b", "lst-c"]
    assert names(labels=["x", "y"]) == ["lst-b"]
    assert names(labels="x") == ["lst-b", "lst-a"]
    assert names(**{"experimentIdFilter.notIn": [made["lst-a"]]}) == ["lst-b", "lst-c"]
    assert names(**{"experimentIdFilter.gt": ids[0]}) == ["lst-a", "lst-c"]
    me = cli_master.get("/api/v1/me")["user"]["id"]
    assert names(userIds=[me]) == ["lst-b", "lst-a", "lst-c"]
    assert names(userIds=[me + 1000]) == []
    assert (
        cli_master.get("/api/v1/experiments", params={**window, "labels": "x"})["pagination"][
            "total"
        ]
        == 2
    )
    # The official SDK's list with its sort, order, ids and labels.
    got = official.python(
        f"""
        from determined.common.experimental import experiment
        exps = client.list_experiments(
            sort_by=experiment.ExperimentSortBy.NAME,
            order_by=client.OrderBy.DESC,
            experiment_ids={ids},
            labels=["x"],
        )
        print(json.dumps([e.name for e in exps]))
        """
    )
    assert got == ["lst-b", "lst-a"]


def test_trial_workloads_honour_filter_order_and_deleted_checkpoints(
    cli_master: Master, official: Official, finished: int
) -> None:
    trial_id = trials(cli_master, finished)[0]["id"]

    def kinds(**params: Any) -> list[str]:
        body = cli_master.get(f"/api/v1/trials/{trial_id}/workloads", params=params)
        return [next(k for k in ("training", "validation", "checkpoint") if w.get(k))
                for w in body["workloads"]]  # fmt: skip

    every = kinds()
    assert {"training", "validation", "checkpoint"} <= set(every)
    assert kinds(filter="FILTER_OPTION_VALIDATION") == [k for k in every if k == "validation"]
    assert kinds(filter="FILTER_OPTION_CHECKPOINT") == [k for k in every if k == "checkpoint"]
    assert kinds(filter="FILTER_OPTION_CHECKPOINT_OR_VALIDATION") == [
        k for k in every if k != "training"
    ]
    assert kinds(orderBy="ORDER_BY_DESC") == every[::-1]

    def checkpoint_states(**params: Any) -> list[str]:
        body = cli_master.get(
            f"/api/v1/trials/{trial_id}/workloads",
            params={"filter": "FILTER_OPTION_CHECKPOINT", **params},
        )
        return [w["checkpoint"]["state"] for w in body["workloads"]]

    assert "STATE_DELETED" in checkpoint_states()  # the GC collected the earlier one
    assert checkpoint_states(removeDeletedCheckpoints="true") == ["STATE_COMPLETED"]
    # The official bindings send the filter as Determined's enum and parse the answer.
    got = official.python(
        f"""
        r = bindings.get_GetTrialWorkloads(
            session, trialId={trial_id},
            filter=bindings.GetTrialWorkloadsRequestFilterOption.VALIDATION,
        )
        print(json.dumps([w.validation is not None for w in r.workloads]))
        """
    )
    assert got and all(got)


def test_validate_only_answers_what_the_bindings_parse_and_creates_nothing(
    cli_master: Master, official: Official
) -> None:
    """`det e create --test` first posts the config with validateOnly: the bindings require an
    experiment object in the answer (det sent null and the official CLI crashed)."""
    before = len(cli_master.get("/api/v1/experiments?limit=1000")["experiments"])
    config = sim_config("validate-only", trials=1)
    answer = official.python(
        f"""
        req = bindings.v1CreateExperimentRequest(config={config!r}, validateOnly=True)
        resp = bindings.post_CreateExperiment(session, body=req)
        print(json.dumps([resp.experiment.id, resp.experiment.state.value]))
        """
    )
    assert answer == [0, "STATE_UNSPECIFIED"]
    assert len(cli_master.get("/api/v1/experiments?limit=1000")["experiments"]) == before


def test_fork_with_parent_id_trains_the_parents_code_and_records_the_lineage(
    cli_master: Master, official: Official
) -> None:
    """What Determined's WebUI Fork sends: CreateExperiment with parentId and a config alone.
    The fork gets the parent's code; forkedFrom names the parent in both reads."""
    parent = cli_support.create_via_api(cli_master, sim_config("fork-parent", trials=1), False)
    config = sim_config("the-fork", trials=1)
    fork = official.python(
        f"""
        req = bindings.v1CreateExperimentRequest(config={config!r}, parentId={parent})
        made = bindings.post_CreateExperiment(session, body=req).experiment
        got = bindings.get_GetExperiment(session, experimentId=made.id).experiment
        print(json.dumps([made.id, made.forkedFrom, got.forkedFrom, got.name]))
        """
    )
    assert fork[1:] == [parent, parent, "the-fork"]
    tree = cli_master.get(f"/api/v1/experiments/{fork[0]}/file_tree")["files"]
    assert [n["path"] for n in tree] == ["train.py"]
    listed = cli_master.get("/api/v1/experiments", params={"limit": 1000})["experiments"]
    lineage = {e["id"]: e.get("forkedFrom") for e in listed}
    assert lineage[fork[0]] == parent and lineage[parent] is None
    r = cli_master.session().post(
        f"{cli_master.url}/api/v1/experiments",
        json={"config": config, "parentId": 987654},
        timeout=30,
    )
    assert r.status_code == 400 and "parentId" in r.text


def test_sdk_checkpoint_metadata_added_and_removed(
    cli_master: Master, official: Official, finished: int
) -> None:
    """Checkpoint.add_metadata / remove_metadata (PostCheckpointMetadata; a 501 before): the
    whole new metadata replaces the old, except steps_completed, which stays the step; a bad
    request changes nothing and names the field."""
    best = _best_uuid(cli_master, finished)
    before = cli_master.get(f"/api/v1/checkpoints/{best}")["checkpoint"]["metadata"]
    got = official.python(
        f"""
        ckpt = client.get_checkpoint({best!r})
        ckpt.add_metadata({{"stage": "prod", "owner": {{"team": "vision"}}}})
        ckpt.remove_metadata(["owner", "steps_completed"])
        print(json.dumps(client.get_checkpoint({best!r}).metadata))
        """
    )
    assert got == {**before, "stage": "prod"}
    assert got["steps_completed"] == before["steps_completed"]

    s, url = cli_master.session(), f"{cli_master.url}/api/v1/checkpoints/{best}/metadata"
    for body, field in (
        ({"checkpoint": {"uuid": str(uuid.uuid4()), "metadata": {}}}, "checkpoint.uuid"),
        ({"checkpoint": {"uuid": best, "metadata": [1]}}, "checkpoint.metadata"),
        ({}, "checkpoint"),
    ):
        r = s.post(url, json=body, timeout=30)
        assert r.status_code == 400 and field in r.json()["message"], r.text
    assert cli_master.get(f"/api/v1/checkpoints/{best}")["checkpoint"]["metadata"] == got


def test_sdk_metrics_of_the_trials_that_used_a_checkpoint_or_model_version(
    cli_master: Master, official: Official, finished: int
) -> None:
    """ReportTrialSourceInfo (what core_context.experimental.report_task_using_checkpoint and
    _model_version send), then Checkpoint.get_metrics and ModelVersion.get_metrics (501s
    before): the reports of the trials that used it, through the official bindings."""
    best = _best_uuid(cli_master, finished)
    user, other = sorted(t["id"] for t in trials(cli_master, finished))[:2]
    cli_master.post("/api/v1/models", {"name": "used-model"})
    cli_master.post("/api/v1/models/used-model/versions", {"checkpointUuid": best})
    got = official.python(
        f"""
        def used(trial_id, **model):
            bindings.post_ReportTrialSourceInfo(session, body=bindings.v1ReportTrialSourceInfoRequest(
                trialSourceInfo=bindings.v1TrialSourceInfo(
                    checkpointUuid={best!r}, trialId=trial_id,
                    trialSourceInfoType=bindings.v1TrialSourceInfoType.INFERENCE, **model)))
        version = client.get_model("used-model").get_version(1)
        used({user})
        used({other}, modelId=version.model_id, modelVersion=version.model_version)
        ckpt = client.get_checkpoint({best!r})
        by_ckpt = [(m.trial_id, m.steps_completed) for m in ckpt.get_metrics("training")]
        by_version = [(m.trial_id, m.steps_completed) for m in version.get_metrics("training")]
        print(json.dumps({{"ckpt": by_ckpt, "version": by_version}}))
        """
    )

    def steps(tid: int) -> list[list[int]]:
        reports = cli_master.get(f"/api/v1/trials/{tid}/metrics", params={"group": "training"})
        return [[tid, m["totalBatches"]] for m in reports["metrics"]]

    assert got["ckpt"] == steps(user) + steps(other)
    assert got["version"] == steps(other)
    s, url = cli_master.session(), f"{cli_master.url}/api/v1/trial-source-info"
    for info, field in (
        ({"trialId": user, "checkpointUuid": str(uuid.uuid4())}, "checkpointUuid"),
        ({"trialId": user, "checkpointUuid": best, "trialSourceInfoType": "X"}, "Type"),
        ({"trialId": user, "checkpointUuid": best, "modelId": 1, "modelVersion": 99}, "modelVer"),
    ):
        body = {
            "trialSourceInfo": {"trialSourceInfoType": "TRIAL_SOURCE_INFO_TYPE_INFERENCE", **info}
        }
        r = s.post(url, json=body, timeout=30)
        assert r.status_code == 400 and field in r.json()["message"], r.text


def test_official_create_follow_and_trial_logs_follow_end_with_the_trial(
    cli_master: Master, official: Official, sim_agents: object, tmp_path: Path
) -> None:
    """What a user types most: ``det e create CFG DIR -f`` follows the first trial's logs and
    returns once the trial ends; ``det trial logs -f`` of a finished trial prints and exits."""
    cfg = cli_support.write_config(tmp_path, sim_config("followed", trials=1))
    ctx = cli_support.context_dir(tmp_path)
    out = official("experiment", "create", str(cfg), str(ctx), "-f")
    assert "Created experiment" in out and "Following first trial with ID" in out, out
    tid = int(re.search(r"Following first trial with ID (\d+)", out).group(1))  # type: ignore[union-attr]
    assert f"trial {tid} step 4" in out, out
    assert cli_master.get(f"/api/v1/trials/{tid}")["trial"]["state"] in (
        "STATE_COMPLETED",
        "STATE_ACTIVE",  # the last log line can come before the trial's end is recorded
    )
    again = official("trial", "logs", "-f", str(tid))
    assert [ln for ln in again.splitlines() if f"trial {tid} step" in ln][-1].endswith("step 4")


# From test_preview_search.py (in-process since): the official client is a process and needs a
# port.
def test_official_client_parses_and_prints_the_summary(
    cli_master: Master, official: Official, tmp_path: Path
) -> None:
    cfg = cli_support.write_config(tmp_path, PREVIEW_CONFIG.format(mode="standard"))
    got = official.python(
        f"""
        config = json.loads({json.dumps(yaml.safe_load(cfg.read_text()))!r})
        resp = bindings.post_PreviewHPSearch(
            session, body=bindings.v1PreviewHPSearchRequest(config=config))
        s = resp.summary
        print(json.dumps({{"sampler": s.config.get("sampler"),
                          "counts": sorted([t.count, t.unit.value] for t in s.trials)}}))
        """
    )
    ours = preview(cli_master, PREVIEW_CONFIG.format(mode="standard"))
    assert got["sampler"] == "tpe"
    assert got["counts"] == sorted([t["count"], t["unit"]["value"]] for t in ours["trials"])
    out = official("preview-search", str(cfg))
    assert "sampler: tpe" in out and "train for 64 batches" in out
