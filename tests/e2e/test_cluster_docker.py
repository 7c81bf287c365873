"""A real cluster on the machine's Docker engine: a ``det-master`` on PostgreSQL, two
``det-agent`` processes with two artificial CPU slots each, and the examples running in task
containers (``det-task:py3.11-cpu-torch``, built by ``infra/build-images.sh``)."""

from __future__ import annotations

import importlib.util
import re
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import (
    EXAMPLES,
    LABEL_AGENT,
    LABEL_ALLOCATION,
    Cluster,
    cluster,
    cluster_factory,
    wait_for,
)
from tests.integration.conftest import ADMIN_PASSWORD

__all__ = ["cluster", "cluster_factory"]

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

CORE = EXAMPLES / "core_api"
OFFICIAL = EXAMPLES / "official_client"

# A long single trial with regular checkpoints: long enough to be disturbed while it runs.
# Paced at 5 ms a batch (the example's batch_seconds), 2000 batches last ~10 s however busy the
# machine is, and the trial sleeps instead of spinning a core (unpaced: ~1000 batches/s, 10000
# batches to last as long, and ~7 CPU-s more a run).
LONG: dict[str, Any] = {
    "hyperparameters": {
        "report_every": 10,
        "validate_every": 100,
        "checkpoint_every": 100,
        "batch_seconds": 0.005,
    },
    "searcher": {"max_length": {"batches": 2000}},
    "max_restarts": 2,
}


def steps(cluster: Cluster, tid: int, group: str = "training") -> list[tuple[int, int]]:
    """(trialRunId, totalBatches) of every report of ``group``, in report order."""
    return [(int(m["trialRunId"]), int(m["totalBatches"])) for m in cluster.metrics(tid, group)]


def only_trial(cluster: Cluster, eid: int) -> dict[str, Any]:
    trials = wait_for(lambda: cluster.trials(eid), 60, "the trial to exist")
    assert len(trials) == 1, trials
    return dict(trials[0])


def container_of(cluster: Cluster, trial: dict[str, Any]) -> Any:
    """The running container of the trial's task (one allocation at a time)."""

    def find() -> Any:
        for c in cluster.containers():
            if c.labels.get(LABEL_ALLOCATION, "").startswith(f"{trial['taskId']}."):
                return c
        return None

    return wait_for(find, 120, f"a running container of trial {trial['id']}")


@pytest.mark.slow
def test_adaptive_asha_eight_trials_on_two_agents(shared_cluster: Cluster, tmp_path: Path) -> None:
    cluster = shared_cluster
    torch = pytest.importorskip("torch")
    from det.storage import download_checkpoint

    eid = cluster.create(CORE / "adaptive_asha.yaml", CORE)
    cluster.wait_state(eid, "STATE_COMPLETED", 900)

    trials = cluster.trials(eid)
    assert len(trials) == 8
    max_time = int(
        yaml.safe_load((CORE / "adaptive_asha.yaml").read_text())["searcher"]["max_time"]
    )
    stopped_early = []
    for t in trials:
        assert t["state"] == "STATE_COMPLETED", t
        assert t["restarts"] == 0, t
        assert cluster.metrics(t["id"], "training"), f"trial {t['id']} has no training metrics"
        assert cluster.metrics(t["id"], "validation"), f"trial {t['id']} has no validation"
        if t["totalBatchesProcessed"] < max_time:
            stopped_early.append(t)
            ckpts = cluster.checkpoints_of(t["id"])
            assert ckpts, f"early-stopped trial {t['id']} left no checkpoint"
            last = max(int(c["metadata"]["steps_completed"]) for c in ckpts)
            assert last == t["totalBatchesProcessed"], (t, ckpts)
        else:
            assert t["totalBatchesProcessed"] == max_time, t
    assert stopped_early, "adaptive ASHA stopped no trial early"
    assert len(stopped_early) < len(trials), "no trial trained to max_time"

    # Both agents ran trials: the allocations' containers carried either agent's id.
    agents_used = {
        e["agentId"] for t in trials for e in cluster.trial_logs(t["id"])[:1] if e.get("agentId")
    }
    assert agents_used == {a.agent_id for a in cluster.agents}, agents_used

    exp = cluster.experiment(eid)
    ckpts = [
        c
        for c in cluster.master.get(f"/api/v1/experiments/{eid}/checkpoints")["checkpoints"]
        if c["training"]["searcherMetric"] is not None
    ]
    best = min(ckpts, key=lambda c: c["training"]["searcherMetric"])
    via_storage = tmp_path / "best-storage"
    download_checkpoint(exp["config"]["checkpoint_storage"], best["uuid"], str(via_storage))
    via_cli = tmp_path / "best-cli"
    cluster.det("checkpoint", "download", best["uuid"], "--output-dir", str(via_cli))
    assert (via_cli / "model.pt").read_bytes() == (via_storage / "model.pt").read_bytes()

    # The downloaded weights are the trial's: they reproduce its reported validation loss.
    model_py = importlib.util.spec_from_file_location("example_model", CORE / "model.py")
    assert model_py is not None and model_py.loader is not None
    example = importlib.util.module_from_spec(model_py)
    model_py.loader.exec_module(example)
    net = example.make_model(int(best["training"]["hparams"]["hidden_size"]))
    net.load_state_dict(torch.load(via_storage / "model.pt"))
    _, _, val_x, val_y = example.make_data()
    with torch.no_grad():
        loss = torch.nn.functional.mse_loss(net(val_x), val_y).item()
    assert loss == pytest.approx(best["training"]["searcherMetric"], rel=1e-4)


@pytest.mark.slow
def test_killed_container_restarts_from_latest_checkpoint(cluster: Cluster) -> None:
    eid = cluster.create(CORE / "single.yaml", CORE, LONG)
    t = only_trial(cluster, eid)
    first = container_of(cluster, t)
    wait_for(lambda: cluster.checkpoints_of(t["id"]), 120, "a first checkpoint")
    first.kill()  # docker kill: SIGKILL from outside, no chance to checkpoint

    def second_run_reported() -> bool:
        return any(run > 1 for run, _ in steps(cluster, t["id"]))

    wait_for(second_run_reported, 180, "metrics from the restarted run")
    trial = cluster.trial(t["id"])
    assert trial["restarts"] == 1, trial
    first_alloc = first.labels[LABEL_ALLOCATION]
    saved_before_kill = [
        int(c["metadata"]["steps_completed"])
        for c in cluster.checkpoints_of(t["id"])
        if c["allocationId"] == first_alloc
    ]
    second_run = [s for run, s in steps(cluster, t["id"]) if run > 1]
    # The new container resumed from the first one's latest checkpoint, not from step 0.
    resumed_at = second_run[0] - LONG["hyperparameters"]["report_every"]
    assert saved_before_kill and resumed_at == max(saved_before_kill), (
        second_run,
        saved_before_kill,
    )
    # Logs travel apart from metrics (the agent ships a container's output in batches; the
    # trial reports metrics straight to the master), so the restarted run's metrics can be in
    # the API before its first log lines are: wait for the line, do not read once.
    resumed = re.compile(rf"resumed from \S+ at step {resumed_at}\b")

    def trial_log() -> str:
        return "\n".join(e["log"] or "" for e in cluster.trial_logs(t["id"]))

    try:
        wait_for(lambda: resumed.search(trial_log()), 60, "the 'resumed from' line")
    except TimeoutError as e:
        raise AssertionError(f"{e}; the trial's log ends with:\n{trial_log()[-3000:]}") from None

    cluster.wait_state(eid, "STATE_COMPLETED", 300)
    trial = cluster.trial(t["id"])
    assert trial["restarts"] == 1 and trial["totalBatchesProcessed"] == 2000, trial


def test_agent_killed_and_restarted_reattaches_running_trial(cluster: Cluster) -> None:
    # Long enough to still be training when the agent comes back (~20 s, paced).
    length = 4000
    eid = cluster.create(
        CORE / "single.yaml",
        CORE,
        {**LONG, "searcher": {"max_length": {"batches": length}}},
    )
    t = only_trial(cluster, eid)
    container = container_of(cluster, t)
    alloc = container.labels[LABEL_ALLOCATION]
    wait_for(lambda: steps(cluster, t["id"]), 120, "first training metrics")
    agent = next(a for a in cluster.agents if a.agent_id == container.labels[LABEL_AGENT])
    agent.kill(signal.SIGKILL)
    container.reload()
    assert container.status == "running", "the container died with its agent"
    before = steps(cluster, t["id"])[-1][1]
    # The trial keeps reporting straight to the master while its agent is down.
    wait_for(lambda: steps(cluster, t["id"])[-1][1] > before, 60, "progress without the agent")
    agent.start()
    wait_for(lambda: "reattached to" in agent.output(), 60, "the agent to reattach")
    out = agent.output()
    assert re.search(rf"reattached to {re.escape(alloc)} \({container.short_id}, RUNNING\)", out), (
        out[-2000:]
    )
    assert cluster.trial(t["id"])["state"] == "STATE_RUNNING"
    # The restarted agent still reports it: the master does not see it as lost.
    at_reattach = steps(cluster, t["id"])[-1][1]
    assert at_reattach < length

    cluster.wait_state(eid, "STATE_COMPLETED", 300)
    trial = cluster.trial(t["id"])
    assert trial["restarts"] == 0, trial
    assert trial["totalBatchesProcessed"] == length
    assert {run for run, _ in steps(cluster, t["id"])} == {1}
    # Its logs went on through the agent's restart: every report once, none lost or repeated.
    logged = re.findall(
        r"training metrics at (\d+):", "".join(e["log"] or "" for e in cluster.trial_logs(t["id"]))
    )
    step = LONG["hyperparameters"]["report_every"]
    assert [int(s) for s in logged] == list(range(step, length + 1, step))
    # The reattached agent saw the container exit and cleaned it up.
    wait_for(lambda: not cluster.containers(running_only=False), 30, "the container to be removed")


def test_distributed_example_logs_both_ranks(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    eid = cluster.create(
        CORE / "distributed.yaml", CORE, {"searcher": {"max_length": {"batches": 100}}}
    )
    cluster.wait_state(eid, "STATE_COMPLETED", 300)
    t = only_trial(cluster, eid)
    assert t["totalBatchesProcessed"] == 100
    assert [s for _, s in steps(cluster, t["id"], "validation")] == [50, 100]
    # The launcher prefixed each worker's lines with "[rank=N] "; the agent shipped that as
    # rankId (Determined's TaskLog field), and `det trial logs` shows the prefix again.
    logs = cluster.trial_logs(t["id"])
    by_rank = {r: [e["log"] for e in logs if e["rankId"] == r] for r in (0, 1)}
    assert by_rank[1], "nothing of rank 1 in the trial's logs"
    assert any("saved checkpoint" in line for line in by_rank[0])
    assert not any("saved checkpoint" in line for line in by_rank[1])
    assert not any((e["log"] or "").startswith("[rank=") for e in logs)
    shown = cluster.det("trial", "logs", str(t["id"])).splitlines()
    for rank in (0, 1):
        assert any(line.startswith(f"[rank={rank}] ") for line in shown), shown[:20]


def test_official_determined_client_runs_unmodified(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    eid = cluster.create(OFFICIAL / "const.yaml", OFFICIAL)
    cluster.wait_state(eid, "STATE_COMPLETED", 300)
    t = only_trial(cluster, eid)
    assert [s for _, s in steps(cluster, t["id"])] == list(range(10, 101, 10))
    assert [s for _, s in steps(cluster, t["id"], "validation")] == [50, 100]
    ckpts = cluster.checkpoints_of(t["id"])
    assert sorted(int(c["metadata"]["steps_completed"]) for c in ckpts) == [50, 100]
    assert_retention_applied(cluster, eid, t["id"], "model.pt")
    logs = "\n".join(e["log"] or "" for e in cluster.trial_logs(t["id"]))
    assert "official_client_example" in logs


def assert_retention_applied(
    cluster: Cluster, eid: int, tid: int, file: str
) -> list[dict[str, Any]]:
    """After the experiment's checkpoint GC (default policy: each trial's best and latest),
    kept checkpoints have their files and deleted ones have none; returns the kept ones."""
    cluster.wait_checkpoint_gc(eid)
    ckpts = cluster.checkpoints_of(tid)
    latest = max(ckpts, key=lambda c: int(c["metadata"]["steps_completed"]))
    scored = [c for c in ckpts if c["training"]["searcherMetric"] is not None]
    best = min(scored, key=lambda c: c["training"]["searcherMetric"])
    keep = {latest["uuid"], best["uuid"]}
    for c in ckpts:
        stored = cluster.checkpoints / c["uuid"]
        if c["uuid"] in keep:
            assert c["state"] == "STATE_COMPLETED" and (stored / file).is_file(), c
        else:
            assert c["state"] == "STATE_DELETED" and not stored.exists(), c
    return [c for c in ckpts if c["uuid"] in keep]


def test_a_trial_class_runs_with_its_legacy_entrypoint(shared_cluster: Cluster) -> None:
    """Determined's PyTorchTrial with ``entrypoint: model_def:RegressionTrial``, unchanged: the
    official package's harness trains it against this master."""
    cluster = shared_cluster
    example = EXAMPLES / "pytorch_trial"
    eid = cluster.create(example / "const.yaml", example)
    cluster.wait_state(eid, "STATE_COMPLETED", 300)
    t = only_trial(cluster, eid)
    validation = cluster.metrics(t["id"], "validation")
    assert [m["totalBatches"] for m in validation] == [100, 200]
    losses = [m["metrics"]["avg_metrics"]["validation_loss"] for m in validation]
    assert losses[-1] < 0.05, losses  # y = 3x - 1 with noise 0.05: learned
    assert cluster.metrics(t["id"], "training")
    ckpts = cluster.checkpoints_of(t["id"])
    assert 200 in [int(c["metadata"]["steps_completed"]) for c in ckpts]
    # the official format: a state dict plus a copy of the model definition
    for kept in assert_retention_applied(cluster, eid, t["id"], "state_dict.pth"):
        assert (cluster.checkpoints / kept["uuid"] / "code" / "model_def.py").is_file()
    assert t["searcherMetricValue"] == pytest.approx(min(losses))


@pytest.mark.slow
def test_official_create_test_mode_trains_one_batch_and_succeeds(
    shared_one_slot: Cluster,
) -> None:
    """The official 0.38.1 ``det experiment create --test``: it validates the config
    (validateOnly), creates a test experiment from it (one batch, validation and checkpoint
    after it, no restarts, checkpoints not kept) and follows it to COMPLETED, on real Docker."""
    import subprocess

    from tests.compat.official import ensure_official_venv

    cluster = shared_one_slot
    example = EXAMPLES / "pytorch_trial"
    home = cluster.tmp / "official-home"
    home.mkdir(exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "DET_MASTER": cluster.master.url}
    det = str(ensure_official_venv() / "det")
    login = subprocess.run(
        [det, "user", "login", "admin"],
        input=ADMIN_PASSWORD + "\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert login.returncode == 0, login.stderr
    before = {e["id"] for e in cluster.master.get("/api/v1/experiments")["experiments"]}
    r = subprocess.run(
        [det, "experiment", "create", "--test", str(example / "const.yaml"), str(example)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{cluster.dump()}"
    assert "Experiment configuration validation succeeded" in r.stdout, r.stdout
    assert "Model definition test succeeded" in r.stdout, r.stdout
    created = [
        e for e in cluster.master.get("/api/v1/experiments")["experiments"] if e["id"] not in before
    ]
    assert len(created) == 1, created  # validateOnly created nothing; the test experiment one
    eid = created[0]["id"]
    assert created[0]["state"] == "STATE_COMPLETED"
    t = only_trial(cluster, eid)
    assert [m["totalBatches"] for m in cluster.metrics(t["id"], "validation")] == [1]
    assert max(m["totalBatches"] for m in cluster.metrics(t["id"], "training")) == 1


@pytest.mark.slow
def test_a_trial_class_resumes_after_pause_and_continues_on_the_default_image(
    shared_cluster: Cluster,
) -> None:
    """The official package restores a PyTorchTrial with torch.load and no weights_only, which
    torch >= 2.6 (the default image has 2.13) refused: the resumed trial ended in ERROR
    ("Weights only load failed"). Paused and activated, it resumes from its checkpoint; a
    finished one continued trains on from its last checkpoint."""
    cluster = shared_cluster
    example = EXAMPLES / "pytorch_trial"
    long = {"searcher": {"max_length": {"batches": 100000}}, "max_restarts": 0}
    eid = cluster.create(example / "const.yaml", example, long)
    t = only_trial(cluster, eid)
    first = wait_for(lambda: cluster.checkpoints_of(t["id"]), 300, "a first checkpoint")
    cluster.det("experiment", "pause", str(eid))
    cluster.wait_state(eid, "STATE_PAUSED", 180)
    saved = max(int(c["metadata"]["steps_completed"]) for c in cluster.checkpoints_of(t["id"]))
    assert saved >= int(first[0]["metadata"]["steps_completed"])
    run_before = max(r for r, _ in steps(cluster, t["id"]))
    cluster.det("experiment", "activate", str(eid))

    def resumed() -> bool:
        if cluster.trial(t["id"])["state"] == "STATE_ERROR":
            raise AssertionError(f"the resumed trial failed\n{cluster.dump()}")
        later = [b for r, b in steps(cluster, t["id"]) if r > run_before]
        return bool(later) and min(later) > saved

    wait_for(resumed, 300, "the trial to report again after its checkpoint")
    cluster.det("experiment", "kill", str(eid))
    cluster.wait_state(eid, "STATE_CANCELED", 180)

    done = cluster.create(example / "const.yaml", example)
    cluster.wait_state(done, "STATE_COMPLETED", 300)
    cluster.det("experiment", "continue", str(done), "--config", "searcher.max_length.batches=300")
    trained = only_trial(cluster, done)

    def trained_on() -> bool:
        if cluster.state(done) == "STATE_ERROR":
            raise AssertionError(f"the continued trial failed\n{cluster.dump()}")
        return max(b for _, b in steps(cluster, trained["id"], "validation")) == 300

    wait_for(trained_on, 300, "the continued trial to validate at 300 batches")
    cluster.wait_state(done, "STATE_COMPLETED", 120)


@pytest.mark.slow
def test_official_example_runs_in_an_image_with_only_the_official_package(
    shared_cluster: Cluster,
) -> None:
    """A Determined user's image: torch and determined==0.38.1, no det. The agent's harness
    bundle supplies det's task runner; the script's own ``import determined`` is the image's."""
    cluster = shared_cluster
    import docker

    image = "det-official:py3.11-torch"
    probe = docker.from_env().containers.run(
        image,
        ["python3", "-c", "import importlib.util as u; print(bool(u.find_spec('det')))"],
        remove=True,
    )
    assert probe.decode().strip() == "False", "the image must not carry det"
    eid = cluster.create(OFFICIAL / "const.yaml", OFFICIAL, {"environment": {"image": image}})
    cluster.wait_state(eid, "STATE_COMPLETED", 300)
    t = only_trial(cluster, eid)
    assert [s for _, s in steps(cluster, t["id"], "validation")] == [50, 100]
    logs = "\n".join(e["log"] or "" for e in cluster.trial_logs(t["id"]))
    assert "official_client_example" in logs
