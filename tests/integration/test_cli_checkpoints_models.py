"""``det checkpoint``, ``det model`` and ``det preview-search`` against a live master: one per
module, served on a real port by a thread of the test's process with its control loop
(``cli_support.threaded_cli_master``; the official CLI is a process of its own, det's runs in
the test's process).

The simulated trial writes real checkpoint files into the cluster's shared_fs storage before it
reports them, so ``det checkpoint download`` has something to copy.
"""

from __future__ import annotations

import csv
import io
import json
import re
import tarfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.compat.official import ensure_official_venv
from tests.fakes.sim_agent import SimAgent
from tests.integration import cli_support
from tests.integration.cli_support import Det, exp_state, sim_config, trials, write_config
from tests.integration.conftest import ADMIN_PASSWORD
from tests.integration.test_cli_matches_official import Official
from tests.integration.threaded import ThreadedMaster

pytestmark = pytest.mark.integration
cli_master = cli_support.threaded_cli_master
det = cli_support.det


def storage_dir(master: ThreadedMaster) -> Path:
    return master.data_dir.parent / "checkpoints"


def saving_training(storage: Path) -> Any:
    """Two steps; at each, write ``model.bin`` and ``meta/info.json`` into shared storage, then
    report the checkpoint and a validation through the real API."""

    def train(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        env = spec["env"]
        s = requests.Session()
        s.headers["Grpc-Metadata-x-allocation-token"] = f"Bearer {env['DET_SESSION_TOKEN']}"
        trial_id = int(env["DET_TRIAL_ID"])
        lr = float(json.loads(env["DET_HPARAMS"])["lr"])
        for step in (1, 2):
            ck = str(uuid.uuid4())
            files = {"model.bin": f"weights {trial_id} {step}".encode(), "meta/info.json": b"{}"}
            for rel, data in files.items():
                (storage / ck / rel).parent.mkdir(parents=True, exist_ok=True)
                (storage / ck / rel).write_bytes(data)
            report = {"trialId": trial_id, "trialRunId": int(env["DET_TRIAL_RUN_ID"])}
            s.post(
                f"{master}/api/v1/trials/{trial_id}/metrics",
                json={
                    "group": "training",
                    "metrics": {
                        **report,
                        "stepsCompleted": step,
                        "metrics": {"avgMetrics": {"loss": lr / step}},
                    },
                },
                timeout=10,
            ).raise_for_status()
            s.post(
                f"{master}/api/v1/checkpoints",
                json={
                    "uuid": ck,
                    "taskId": env["DET_TASK_ID"],
                    "allocationId": env["DET_ALLOCATION_ID"],
                    "resources": {rel: str(len(data)) for rel, data in files.items()},
                    "metadata": {"steps_completed": step},
                    "state": "STATE_COMPLETED",
                    "training": {},
                },
                timeout=10,
            ).raise_for_status()
            s.post(
                f"{master}/api/v1/trials/{trial_id}/metrics",
                json={
                    "group": "validation",
                    "metrics": {
                        **report,
                        "stepsCompleted": step,
                        "metrics": {"avgMetrics": {"validation_loss": lr / step}},
                    },
                },
                timeout=10,
            ).raise_for_status()
        return 0

    return train


@pytest.fixture(scope="module")
def saved_exp(cli_master: ThreadedMaster) -> Iterator[int]:
    agent = SimAgent(
        cli_master.url,
        cli_master.agent_token,
        "saver",
        slots=2,
        train=saving_training(storage_dir(cli_master)),
    ).start()
    try:
        eid = cli_support.create_via_api(cli_master, sim_config("saver", trials=2))
        cli_support.wait(lambda: exp_state(cli_master, eid) == "STATE_COMPLETED", 60, "completion")
        # Checkpoint GC (each trial's best and latest: step 2) removes both step-1 checkpoints.
        cli_support.wait(
            lambda: [c["state"] for c in checkpoints(cli_master, eid)].count("STATE_DELETED") == 2,
            60,
            "checkpoint GC",
        )
        yield eid
    finally:
        agent.stop()


def checkpoints(master: ThreadedMaster, eid: int) -> list[dict[str, Any]]:
    return list(master.get(f"/api/v1/experiments/{eid}/checkpoints")["checkpoints"])


def kept(master: ThreadedMaster, eid: int) -> list[dict[str, Any]]:
    return [c for c in checkpoints(master, eid) if c["state"] == "STATE_COMPLETED"]


def test_checkpoint_list_and_best(det: Det, cli_master: ThreadedMaster, saved_exp: int) -> None:
    det.login()
    listed = det.ok("checkpoint", "list", str(saved_exp), "--json").json()
    assert {c["uuid"] for c in listed} == {c["uuid"] for c in checkpoints(cli_master, saved_exp)}
    assert len(listed) == 4
    best = det.ok("checkpoint", "list", str(saved_exp), "--best", "1", "--json").json()
    metric = {c["uuid"]: c["training"]["searcherMetric"] for c in listed}
    assert [c["uuid"] for c in best] == [min(metric, key=lambda u: metric[u])]
    table = det.ok("c", "ls", str(saved_exp)).out
    assert all(c["uuid"] in table for c in listed)


def test_checkpoint_describe(det: Det, cli_master: ThreadedMaster, saved_exp: int) -> None:
    det.login()
    ck = kept(cli_master, saved_exp)[0]
    body = det.ok("checkpoint", "describe", ck["uuid"], "--json").json()
    assert body["uuid"] == ck["uuid"]
    assert body["resources"] == ck["resources"]
    table = det.ok("checkpoint", "describe", ck["uuid"]).out
    assert "model.bin" in table and "meta/info.json" in table
    r = det("checkpoint", "describe", str(uuid.uuid4()))
    assert r.rc == 1 and "not found" in r.err


def test_checkpoint_download_copies_the_files(
    det: Det, cli_master: ThreadedMaster, saved_exp: int, tmp_path: Path
) -> None:
    det.login()
    ck = kept(cli_master, saved_exp)[-1]
    out = tmp_path / "dl"
    r = det.ok("checkpoint", "download", ck["uuid"], "-o", str(out))
    assert str(out) in r.out
    src = storage_dir(cli_master) / ck["uuid"]
    assert (out / "model.bin").read_bytes() == (src / "model.bin").read_bytes()
    assert (out / "meta" / "info.json").read_text() == "{}"
    # A checkpoint the GC deleted: its files are gone from storage; one line, exit 1.
    other = next(
        c["uuid"] for c in checkpoints(cli_master, saved_exp) if c["state"] == "STATE_DELETED"
    )
    assert not (storage_dir(cli_master) / other).exists()
    r = det("checkpoint", "download", other, "-o", str(tmp_path / "gone"))
    assert r.rc == 1 and "not found" in r.err and r.err.count("\n") == 1


def test_model_registry(det: Det, cli_master: ThreadedMaster, saved_exp: int) -> None:
    det.login()
    made = det.ok("model", "create", "mnist-cnn", "--description", "digits", "--json").json()
    assert made["name"] == "mnist-cnn"
    assert "mnist-cnn" in det.ok("model", "list").out
    assert [m["name"] for m in det.ok("model", "list", "--json").json()] == ["mnist-cnn"]
    cks = kept(cli_master, saved_exp)
    for i, ck in enumerate(cks[:2], start=1):
        v = det.ok("model", "register-version", "mnist-cnn", ck["uuid"], "--json").json()
        assert v["version"] == i
    body = det.ok("model", "describe", "mnist-cnn", "--json").json()
    assert body["model"]["description"] == "digits"
    assert [v["checkpoint"]["uuid"] for v in body["modelVersions"]] == [c["uuid"] for c in cks[:2]]
    table = det.ok("m", "describe", "mnist-cnn").out
    assert cks[0]["uuid"] in table and "Version" in table
    assert det.ok("model", "list", "--json").json()[0]["numVersions"] == 2
    r = det("model", "describe", "nope")
    assert r.rc == 1 and "not found" in r.err
    r = det("model", "create", "mnist-cnn")
    assert r.rc == 1 and r.err.count("\n") == 1


def test_trial_states_and_metrics_match_the_api(
    det: Det, cli_master: ThreadedMaster, saved_exp: int
) -> None:
    det.login()
    for t in trials(cli_master, saved_exp):
        body = det.ok("trial", "describe", str(t["id"]), "--json").json()
        vals = [
            w["validation"]["metrics"]["avgMetrics"] for w in body["workloads"] if "validation" in w
        ]
        lr = t["hparams"]["lr"]
        assert vals == [{"validation_loss": lr / 1}, {"validation_loss": lr / 2}]


def test_preview_search_offline(det: Det, tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path,
        """
name: preview
entrypoint: python3 train.py
searcher:
  name: adaptive_asha
  metric: validation_loss
  max_trials: 16
  max_time: 64
  time_metric: batches
  max_rungs: 3
  divisor: 4
hyperparameters:
  lr: {type: double, minval: 0.001, maxval: 0.1}
""",
    )
    # Offline: no master, no login.
    det.monkeypatch.setenv("DET_MASTER", "http://127.0.0.1:1")
    body = det.ok("preview-search", str(cfg), "--json").json()
    assert len(body["trials"]) == 16
    table = det.ok("preview-search", str(cfg)).out
    assert "adaptive_asha" in table and "16 trials" in table
    single = write_config(
        tmp_path,
        "entrypoint: python3 train.py\nsearcher: {name: single, metric: x, max_length: {batches: 5}}\n",
        "s.yaml",
    )
    assert "1 trials" in det.ok("preview-search", str(single)).out
    bad = write_config(
        tmp_path,
        "entrypoint: python3 train.py\nsearcher: {name: random, metric: x, max_trials: -1}\n",
        "bad.yaml",
    )
    r = det("preview-search", str(bad))
    assert r.rc == 2 and "searcher.max_trials" in r.err


# --- Determined's verb names (issue 26): ours beside the official CLI ---------------------------


@pytest.fixture(scope="module")
def official(cli_master: ThreadedMaster, tmp_path_factory: pytest.TempPathFactory) -> Official:
    o = Official(ensure_official_venv(), cli_master, tmp_path_factory.mktemp("official-home"))
    o("user", "login", "admin", stdin=ADMIN_PASSWORD + "\n")
    return o


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_list_trials_list_checkpoints_and_config_as_the_official_cli(
    det: Det, official: Official, saved_exp: int
) -> None:
    det.login()
    eid = str(saved_exp)
    ours = _csv(det.ok("experiment", "list-trials", eid, "--csv").out)
    theirs = official.csv("experiment", "list-trials", eid)
    assert len(ours) == 2
    assert [r["Trial ID"] for r in ours] == [r["Trial ID"] for r in theirs]
    assert [r["# of Batches"] for r in ours] == [r["# of Batches"] for r in theirs]
    best = _csv(det.ok("e", "list-checkpoints", eid, "--best", "1", "--csv").out)
    their_best = official.csv("e", "list-checkpoints", eid, "--best", "1")
    assert [r["UUID"] for r in best] == [r["UUID"] for r in their_best]
    assert len(best) == 1
    mine = yaml.safe_load(det.ok("e", "config", eid).out)
    assert mine == yaml.safe_load(official("e", "config", eid))
    assert mine["name"] == "saver"


def test_download_model_def_and_trial_download_as_the_official_cli(
    det: Det, official: Official, cli_master: ThreadedMaster, saved_exp: int, tmp_path: Path
) -> None:
    det.login()
    eid = str(saved_exp)
    names = []
    for who, run in (("ours", lambda *a: det.ok(*a).out), ("official", official)):
        (tmp_path / who).mkdir()  # the official CLI writes only into an existing directory
        run("e", "download-model-def", eid, "--output-dir", str(tmp_path / who))
        with tarfile.open(tmp_path / who / f"experiment_{eid}_model_def.tgz") as tf:
            names.append(sorted(n.lstrip("./") for n in tf.getnames() if n.strip("./")))
    assert names[0] == names[1] and "train.py" in names[0]
    best = kept(cli_master, saved_exp)
    by_loss = min(best, key=lambda c: c["training"]["searcherMetric"])
    tid = str(by_loss["training"]["trialId"])
    src = storage_dir(cli_master) / by_loss["uuid"]
    out = tmp_path / "ckpt-ours"
    det.ok("trial", "download", tid, "--best", "-o", str(out))
    assert (out / "model.bin").read_bytes() == (src / "model.bin").read_bytes()
    # The official CLI (0.38.1's cli/trial.py download) cannot be the reference here: --uuid is
    # refused ("exactly one of ... must be set": it counts a string as not True), and --best and
    # --latest give up when the checkpoint they want is the last one their loop pops.
    out = tmp_path / "by-uuid"
    det.ok("trial", "download", tid, "--uuid", by_loss["uuid"], "-o", str(out))
    assert (out / "model.bin").read_bytes() == (src / "model.bin").read_bytes()
    latest = tmp_path / "latest"
    det.ok("trial", "download", tid, "--latest", "-o", str(latest))
    assert (latest / "meta" / "info.json").is_file()
    r = det("trial", "download", tid, "--best", "--sort-by", "validation_loss")
    assert r.rc != 0 and "--smaller-is-better" in r.err


def test_template_create_and_create_with_include_and_no_context(
    det: Det, official: Official, cli_master: ThreadedMaster, tmp_path: Path
) -> None:
    det.login()
    tpl = write_config(tmp_path, "description: from a template\n", "tpl.yaml")
    det.ok("template", "create", "ours-tpl", str(tpl))
    official("template", "create", "official-tpl", str(tpl))
    listed = {t["name"] for t in cli_master.get("/api/v1/templates")["templates"]}
    assert {"ours-tpl", "official-tpl"} <= listed
    config = write_config(tmp_path, sim_config("include", trials=1))
    extra = tmp_path / "data"
    (extra / "sub").mkdir(parents=True)
    (extra / "sub" / "table.csv").write_text("a,b\n")
    single = tmp_path / "notes.txt"
    single.write_text("hello\n")
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "train.py").write_text("print(1)\n")
    out = det.ok(
        "e", "create", str(config), str(ctx), "-i", str(extra), "--include", str(single), "--paused"
    ).out
    eid = int(out.split()[-1])
    tree = cli_master.get(f"/api/v1/experiments/{eid}/file_tree")["files"]

    def paths(nodes: list[dict[str, Any]]) -> set[str]:
        return {n["path"] for n in nodes} | {p for n in nodes for p in paths(n.get("files") or [])}

    assert {"train.py", "data", "data/sub/table.csv", "notes.txt"} <= paths(tree)
    bare = int(det.ok("e", "create", str(config), "--paused").out.split()[-1])
    assert cli_master.get(f"/api/v1/experiments/{bare}/file_tree")["files"] == []
    r = det("e", "create", str(config), str(ctx), "-i", str(ctx / "train.py"))
    assert r.rc != 0 and "already has 'train.py'" in r.err


# --- Issue 38 item 8: model list-versions and experiment download, beside the official CLI ------


def test_model_list_versions_as_the_official_cli(
    det: Det, official: Official, cli_master: ThreadedMaster, saved_exp: int
) -> None:
    det.login()
    cks = kept(cli_master, saved_exp)
    cli_master.post("/api/v1/models", {"name": "versions-listed", "description": "two"})
    for ck in cks:
        cli_master.post(
            "/api/v1/models/versions-listed/versions",
            {"modelName": "versions-listed", "checkpointUuid": ck["uuid"]},
        )
    ours = det.ok("model", "list-versions", "versions-listed", "--json").json()
    theirs = json.loads(official("model", "list-versions", "versions-listed", "--json"))
    assert ours == theirs
    assert [v["checkpoint"]["uuid"] for v in ours["modelVersions"]] == [c["uuid"] for c in cks]
    tables = (
        det.ok("m", "list-versions", "versions-listed").out,
        official("model", "list-versions", "versions-listed"),
    )
    for text in tables:
        for header in ("Version #", "Trial ID", "Batch #", "Checkpoint UUID", "Workspace ID"):
            assert header in text, (header, text)
        # One row a version, the newest first: its number, trial and uuid on one line.
        rows = [line for line in text.splitlines() if any(c["uuid"] in line for c in cks)]
        assert [next(c["uuid"] for c in cks if c["uuid"] in r) for r in rows] == [
            c["uuid"] for c in reversed(cks)
        ]
        numbered = list(enumerate(cks, start=1))[::-1]
        for row, (number, ck) in zip(rows, numbered, strict=True):
            cells = [c.strip() for c in re.split(r"\s{2,}|\|", row) if c.strip()]
            assert cells[:2] == [str(number), str(ck["training"]["trialId"])], cells
    r = det("model", "list-versions", "no-such-model")
    assert r.rc == 1 and "no-such-model" in r.err and r.err.count("\n") == 1, r.err


def test_experiment_download_top_n_as_the_official_cli(
    det: Det, official: Official, cli_master: ThreadedMaster, saved_exp: int, tmp_path: Path
) -> None:
    det.login()
    eid = str(saved_exp)
    best = sorted(kept(cli_master, saved_exp), key=lambda c: c["training"]["searcherMetric"])
    assert len(best) == 2
    for who, run in (("ours", lambda *a: det.ok(*a).out), ("official", official)):
        out = tmp_path / who
        printed = run("e", "download", eid, "--top-n", "2", "-o", str(out), "-q").split()
        assert [Path(p).name for p in printed] == [c["uuid"] for c in best], who
        assert sorted(p.name for p in out.iterdir()) == sorted(c["uuid"] for c in best)
        for c in best:
            src = storage_dir(cli_master) / c["uuid"]
            assert (out / c["uuid"] / "model.bin").read_bytes() == (src / "model.bin").read_bytes()
            assert (out / c["uuid"] / "meta" / "info.json").read_text() == "{}"
        # By another order: the worst first.
        worst = run(
            "e",
            "download",
            eid,
            "--sort-by",
            "validation_loss",
            "--smaller-is-better",
            "false",
            "-o",
            str(tmp_path / f"{who}-worst"),
            "-q",
        ).split()
        assert [Path(p).name for p in worst] == [best[-1]["uuid"]], who
    # The default (the best one) as a table, as the official CLI shows it.
    one = tmp_path / "one"
    text = det.ok("experiment", "download", eid, "-o", str(one)).out
    assert text.startswith(f"Local checkpoint path:\n{one / best[0]['uuid']}")
    assert "Validation Metrics" in text and best[1]["uuid"] not in text
    assert [p.name for p in one.iterdir()] == [best[0]["uuid"]]

    # Bad input: one line naming it, nothing made.
    bad = tmp_path / "bad"
    for args, rc, named in (
        (("--top-n", "0"), 2, "--top-n"),
        (("--sort-by", "validation_loss"), 2, "--smaller-is-better"),
        (("--smaller-is-better", "true"), 2, "--sort-by"),
        (("--smaller-is-better", "maybe", "--sort-by", "x"), 2, "--smaller-is-better"),
    ):
        r = det("e", "download", eid, *args, "-o", str(bad))
        assert r.rc == rc and named in r.err.splitlines()[-1], (args, r.err)
    r = det("e", "download", "999999", "-o", str(bad))
    assert r.rc == 1 and "999999" in r.err and r.err.count("\n") == 1, r.err
    # An experiment with no completed checkpoint (one never activated): exit 1, not silence.
    idle = cli_support.create_via_api(cli_master, sim_config("no-checkpoints"), activate=False)
    r = det("e", "download", str(idle), "-o", str(bad))
    assert r.rc == 1 and "no completed checkpoint" in r.err and r.err.count("\n") == 1, r.err
    assert not bad.exists()
