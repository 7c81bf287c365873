"""``det experiment`` and ``det trial`` on experiments that run to completion on SimAgents, and
``det experiment wait`` as a process on a pipe and on a terminal. The module's master is served
on a real port by a thread of the test's process with its control loop
(``cli_support.threaded_cli_master``: ``det`` runs as a process of its own too); the tests with
a master of their own take the app with its loop in the test's process (``loop_master``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration import cli_support
from tests.integration.cli_support import (
    Det,
    context_dir,
    exp_state,
    sim_config,
    trials,
    write_config,
)
from tests.integration.conftest import MasterClient
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration
cli_master = cli_support.threaded_cli_master
det = cli_support.det
sim_agents = cli_support.sim_agents


def created_id(out: str) -> int:
    assert out.startswith("Created experiment "), out
    return int(out.split()[2])


@pytest.fixture(scope="module")
def done_exp(
    cli_master: MasterClient, sim_agents: object, tmp_path_factory: pytest.TempPathFactory
) -> int:
    """An experiment of 2 trials created through the API and run to completion."""
    eid = cli_support.create_via_api(cli_master, sim_config("done", trials=2))
    cli_support.wait(lambda: exp_state(cli_master, eid) == "STATE_COMPLETED", 60, "completion")
    return eid


def test_create_wait_describe_list(
    det: Det, cli_master: MasterClient, sim_agents: object, tmp_path: Path
) -> None:
    det.login()
    cfg = write_config(tmp_path, sim_config("cli-created", trials=3))
    eid = created_id(det.ok("experiment", "create", str(cfg), str(context_dir(tmp_path))).out)
    # As its own process: its stderr is then the command's alone (in this process, another
    # test's server thread printing a traceback landed in it once).
    r = cli_support.run_subprocess(
        cli_master.url, det.home, "experiment", "wait", str(eid), "--polling-interval", "0.2"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"experiment {eid} ended COMPLETED" in r.stdout
    assert r.stderr == ""  # no progress bar when stderr is not a terminal

    described = det.ok("experiment", "describe", str(eid), "--json").json()
    assert isinstance(described, list) and len(described) == 1
    body = described[0]
    assert body["experiment"]["id"] == eid
    assert body["experiment"]["state"] == "STATE_COMPLETED"
    assert len(body["trials"]) == 3
    assert {t["state"] for t in body["trials"]} == {"STATE_COMPLETED"}
    assert {t["totalBatchesProcessed"] for t in body["trials"]} == {4}
    api_trials = {t["id"]: t for t in trials(cli_master, eid)}
    assert {t["id"]: t["hparams"] for t in body["trials"]} == {
        i: t["hparams"] for i, t in api_trials.items()
    }

    table = det.ok("experiment", "describe", str(eid)).out
    assert "Trial ID" in table and "validation_loss" in table
    for tid in api_trials:
        assert f"\n{tid} " in table
    assert "\x1b[" not in table  # no colour when stdout is not a terminal

    listed = det.ok("experiment", "list", "--json").json()
    assert eid in [e["id"] for e in listed]
    assert "cli-created" in det.ok("experiment", "list").out


def test_describe_several_ids_with_commas_or_spaces(
    det: Det, done_exp: int, cli_master: MasterClient
) -> None:
    det.login()
    other = cli_support.create_via_api(cli_master, sim_config("other", trials=1), activate=False)
    for args in ([f"{done_exp},{other}"], [str(done_exp), str(other)]):
        out = det.ok("e", "describe", *args, "--json").json()
        assert [b["experiment"]["id"] for b in out] == [done_exp, other]
    det.ok("e", "kill", str(other))


def test_create_follow_first_trial_streams_its_logs(
    det: Det, sim_agents: object, tmp_path: Path
) -> None:
    det.login()
    cfg = write_config(tmp_path, sim_config("follow", trials=1))
    r = det.ok("experiment", "create", str(cfg), str(context_dir(tmp_path)), "-f")
    eid = created_id(r.out)
    tid = trials(det.master, eid)[0]["id"]
    assert r.out.splitlines()[1:] == [f"[rank=0] trial {tid} step {i}" for i in range(1, 5)]


def test_experiment_and_trial_logs(det: Det, done_exp: int, cli_master: MasterClient) -> None:
    det.login()
    first = min(t["id"] for t in trials(cli_master, done_exp))
    out = det.ok("experiment", "logs", str(done_exp)).out.splitlines()
    assert out == [f"[rank=0] trial {first} step {i}" for i in range(1, 5)]
    for tid in (t["id"] for t in trials(cli_master, done_exp)):
        assert det.ok("trial", "logs", str(tid)).out.splitlines() == [
            f"[rank=0] trial {tid} step {i}" for i in range(1, 5)
        ]
        # -f on an ended trial prints everything and returns.
        assert det.ok("t", "logs", "-f", str(tid)).out.count("\n") == 4
    assert det.ok("trial", "logs", str(first), "--tail", "2").out.splitlines() == [
        f"[rank=0] trial {first} step {i}" for i in (3, 4)
    ]
    assert det.ok("e", "logs", str(done_exp), "--head", "1").out.splitlines() == [
        f"[rank=0] trial {first} step 1"
    ]
    assert det("t", "logs", str(first), "--head", "1", "--tail", "1").rc == 2
    # A line without a rank (not from a worker process) is printed as shipped.
    task_id = cli_master.get(f"/api/v1/trials/{first}")["trial"]["taskId"]
    cli_support.post_task_logs(cli_master, task_id, ["from the launcher"], rank=None)
    assert det.ok("t", "logs", str(first), "--tail", "1").out == "from the launcher\n"


def test_trial_describe(det: Det, done_exp: int, cli_master: MasterClient) -> None:
    det.login()
    t = trials(cli_master, done_exp)[0]
    body = det.ok("trial", "describe", str(t["id"]), "--json").json()
    assert body["trial"]["id"] == t["id"]
    assert body["trial"]["hparams"] == t["hparams"]
    kinds = [next(iter(w)) for w in body["workloads"]]
    assert kinds.count("training") == 4
    assert kinds.count("validation") == 2 and kinds.count("checkpoint") == 2
    vals = [w["validation"] for w in body["workloads"] if "validation" in w]
    assert [v["totalBatches"] for v in vals] == [2, 4]
    assert all("validation_loss" in v["metrics"]["avgMetrics"] for v in vals)
    table = det.ok("t", "describe", str(t["id"])).out
    assert "validation_loss=" in table and "checkpoint" in table
    assert "loss=" in det.ok("t", "describe", str(t["id"]), "--metrics").out


def test_archive_unarchive(det: Det, done_exp: int) -> None:
    det.login()
    det.ok("experiment", "archive", str(done_exp))
    assert done_exp not in [e["id"] for e in det.ok("e", "list", "--json").json()]
    assert done_exp in [e["id"] for e in det.ok("e", "list", "--all", "--json").json()]
    det.ok("experiment", "unarchive", str(done_exp))
    assert done_exp in [e["id"] for e in det.ok("e", "list", "--json").json()]


def test_list_shows_only_my_experiments_unless_all(det: Det, done_exp: int) -> None:
    det.login()
    det.ok("user", "create", "frank", "--password", "Frank-pw-1")
    det.login("frank", "Frank-pw-1")
    assert done_exp not in [e["id"] for e in det.ok("e", "list", "--json").json()]
    assert done_exp in [e["id"] for e in det.ok("e", "list", "--all", "--json").json()]


def test_short_aliases(det: Det, done_exp: int, cli_master: MasterClient) -> None:
    det.login()
    assert (
        det.ok("e", "describe", str(done_exp), "--json").json()[0]["experiment"]["id"] == done_exp
    )
    tid = trials(cli_master, done_exp)[0]["id"]
    assert det.ok("t", "describe", str(tid), "--json").json()["trial"]["id"] == tid
    assert {a["id"] for a in det.ok("a", "list", "--json").json()} == {"sim-0", "sim-1"}


def test_unknown_ids_exit_1_with_not_found(det: Det) -> None:
    det.login()
    for args in (
        ("experiment", "describe", "9999"),
        ("e", "pause", "9999"),
        ("e", "logs", "9999"),
        ("e", "wait", "9999"),
        ("trial", "describe", "9999"),
        ("t", "logs", "9999"),
        ("t", "kill", "9999"),
    ):
        r = det(*args)
        assert r.rc == 1, args
        assert "not found" in r.err, (args, r.err)
        assert r.err.count("\n") == 1 and "Traceback" not in r.err


def test_bad_config_exits_2_naming_the_field(det: Det, tmp_path: Path) -> None:
    det.login()
    ctx = str(context_dir(tmp_path))
    bad_field = write_config(
        tmp_path,
        sim_config().replace("max_concurrent_trials: 2", "max_concurrent_trials: -3"),
        "a.yaml",
    )
    r = det("experiment", "create", str(bad_field), ctx)
    assert r.rc == 2 and "searcher.max_concurrent_trials" in r.err, r.err
    unknown = write_config(tmp_path, sim_config() + "bogus_field: 1\n", "b.yaml")
    r = det("experiment", "create", str(unknown), ctx)
    assert r.rc == 2 and "bogus_field" in r.err
    broken = write_config(tmp_path, "searcher: [1\n", "c.yaml")
    r = det("experiment", "create", str(broken), ctx)
    assert r.rc == 2 and "YAML" in r.err
    r = det("experiment", "create", str(tmp_path / "missing.yaml"), ctx)
    assert r.rc == 2 and "missing.yaml" in r.err
    r = det("experiment", "create", str(bad_field), str(tmp_path / "nope"))
    assert r.rc == 2 and "nope" in r.err
    r = det("experiment", "create", str(unknown), ctx, "--config", "searcher.max_trials")
    assert r.rc == 2 and "KEY=VALUE" in r.err
    r = det("experiment", "describe", "abc")
    assert r.rc == 2
    for r in [det("experiment", "create", str(bad_field), ctx)]:
        assert r.err.count("\n") == 1


CAPPED_CONFIG = """
name: capped
entrypoint: python3 train.py
searcher: {name: random, metric: validation_loss, max_trials: 4, max_concurrent_trials: 4}
hyperparameters:
  lr: {type: double, minval: 0.01, maxval: 1.0}
reproducibility: {experiment_seed: 7}
"""


def test_set_max_slots_caps_what_the_experiment_runs_at_once(
    loop_master: InProcessMaster, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``det e set max-slots``: stored in the config, honoured by the scheduler (the job says
    why it waits), raised while the experiment runs. Its own master and one 4-slot agent whose
    trials train only once released, and count how many of them run at once."""
    from tests.fakes.sim_agent import SimAgent, default_training, wait

    release = threading.Event()
    lock = threading.Lock()
    running = [0, 0]  # now, peak

    def gated(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        with lock:
            running[0] += 1
            running[1] = max(running)
        try:
            while not release.is_set() and not killed.is_set():
                killed.wait(0.05)
            return default_training(master, spec, killed, steps=2, validate_every=2)
        finally:
            with lock:
                running[0] -= 1

    m = loop_master
    agent = SimAgent(m.url, m.agent_token, "sim-cap", slots=4, train=gated).start()
    try:
        wait(lambda: len(m.get("/api/v1/agents")["agents"]) == 1, 30, "the agent")
        d = Det(m, tmp_path, capsys, monkeypatch)
        d.login()
        eid = cli_support.create_via_api(m, CAPPED_CONFIG, activate=False)
        assert m.get(f"/api/v1/experiments/{eid}")["config"]["resources"].get("max_slots") is None
        out = d.ok("experiment", "set", "max-slots", str(eid), "1").out
        assert "max-slots set" in out, out
        assert m.get(f"/api/v1/experiments/{eid}")["config"]["resources"]["max_slots"] == 1
        d.ok("experiment", "activate", str(eid))

        def job() -> dict[str, Any]:
            listed = m.get("/api/v1/job-queues")["jobs"]
            return dict(next(j for j in listed if j["entityId"] == str(eid)))

        wait(lambda: len(trials(m, eid)) == 4, 30, "the searcher's 4 trials")
        wait(lambda: job()["allocatedSlots"] == 1 and running[0] == 1, 30, "one trial running")
        reason = str(job().get("pendingReason"))
        assert "max_slots" in reason and "1 of 1" in reason, reason
        # Many scheduling passes later, still one: the 3 other slots stay free.
        for _ in range(10):
            assert job()["allocatedSlots"] == 1 and running[1] == 1
            time.sleep(0.2)
        assert job()["requestedSlots"] == 4

        refused = d("experiment", "set", "max-slots", str(eid), "-1")
        assert refused.rc != 0 and "maxSlots" in refused.err, refused.err
        d.ok("experiment", "set", "max-slots", str(eid), "3")
        assert m.get(f"/api/v1/experiments/{eid}")["config"]["resources"]["max_slots"] == 3
        wait(lambda: job()["allocatedSlots"] == 3 and running[0] == 3, 30, "three trials")
        assert "3 of 3" in str(job()["pendingReason"])

        release.set()
        cli_support.wait(lambda: exp_state(m, eid) == "STATE_COMPLETED", 90, "completion")
        assert running[1] == 3  # never more than the cap, at any moment
    finally:
        release.set()
        agent.stop()


SINGLE_CONFIG = """
name: continued
entrypoint: python3 train.py
searcher: {name: single, metric: validation_loss, max_length: 4}
hyperparameters: {lr: 0.5}
"""


def test_continue_trains_the_same_trial_further_from_its_latest_checkpoint(
    loop_master: InProcessMaster, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``det e continue`` (ContinueExperiment) on a single-trial experiment that completed: the
    same experiment and trial train on to the new ``searcher.max_length``, starting from the
    trial's latest checkpoint, then complete again."""
    import json

    from tests.fakes.sim_agent import SimAgent, default_training, wait

    starts: list[tuple[int, str | None]] = []

    def by_config(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        env = spec["env"]
        length = json.loads(env["DET_EXPERIMENT_CONFIG"])["searcher"].get("max_length") or 4
        steps = int(length["batches"] if isinstance(length, dict) else length)
        starts.append((steps, env.get("DET_LATEST_CHECKPOINT")))
        return default_training(master, spec, killed, steps=steps, validate_every=2)

    m = loop_master
    agent = SimAgent(m.url, m.agent_token, "sim-continue", slots=1, train=by_config).start()
    try:
        wait(lambda: len(m.get("/api/v1/agents")["agents"]) == 1, 30, "the agent")
        d = Det(m, tmp_path, capsys, monkeypatch)
        d.login()
        eid = cli_support.create_via_api(m, SINGLE_CONFIG)
        cli_support.wait(lambda: exp_state(m, eid) == "STATE_COMPLETED", 60, "completion")
        (trial,) = trials(m, eid)
        assert trial["totalBatchesProcessed"] == 4 and starts == [(4, None)]
        latest = trial["latestCheckpointUuid"]
        assert latest

        # A change of hyperparameters would make it another trial: refused, nothing changes.
        r = d("experiment", "continue", str(eid), "--config", "hyperparameters.lr=0.1")
        assert r.rc != 0 and "hyperparameters" in r.err, r.err
        assert exp_state(m, eid) == "STATE_COMPLETED"

        for bad in ("searcher: 5", "- a\n- b", "a: [", "resources: {slots_per_trial: -1}"):
            r2 = m.session().post(
                f"{m.url}/api/v1/experiments/continue",
                json={"id": eid, "overrideConfig": bad},
                timeout=30,
            )
            assert r2.status_code == 400, (bad, r2.status_code, r2.text)
        assert exp_state(m, eid) == "STATE_COMPLETED"

        out = d.ok("experiment", "continue", str(eid), "--config", "searcher.max_length=8").out
        assert f"Continued experiment {eid}" in out
        again = d("experiment", "continue", str(eid))
        assert again.rc != 0 and "only an experiment that ended" in again.err, again.err
        cli_support.wait(lambda: exp_state(m, eid) == "STATE_COMPLETED", 60, "completion again")
        (after,) = trials(m, eid)
        assert after["id"] == trial["id"] and after["state"] == "STATE_COMPLETED"
        assert after["totalBatchesProcessed"] == 8
        assert starts == [(4, None), (8, latest)]  # the second run resumed from the checkpoint
        body = m.get(f"/api/v1/experiments/{eid}")
        assert body["experiment"]["numTrials"] == 1
        assert body["config"]["searcher"]["max_length"] in (8, {"batches": 8})

        # Only single-trial experiments: a random search is refused by name.
        many = cli_support.create_via_api(m, sim_config("many", trials=2))
        cli_support.wait(lambda: exp_state(m, many) == "STATE_COMPLETED", 60, "completion")
        r = d("experiment", "continue", str(many))
        assert r.rc != 0 and "single" in r.err, r.err
    finally:
        agent.stop()


# From test_cli_experiment_states.py (in-process since): a det process on a real terminal.
def test_wait_shows_progress_only_on_a_terminal(cli_master: MasterClient, tmp_path: Path) -> None:
    """``wait`` draws a progress bar on a terminal's stderr and nothing on a pipe."""
    import os
    import pty
    import subprocess
    import sys

    eid = cli_support.create_via_api(cli_master, sim_config("tty", trials=1), activate=False)
    # Cancel only once the trial exists: a cancel that comes before the searcher's first pass
    # leaves the experiment STOPPING_CANCELED for good (a master bug, see the report).
    cli_support.until(cli_master, lambda: trials(cli_master, eid), 30, "a trial")
    cli_master.post(f"/api/v1/experiments/{eid}/cancel")
    cli_support.wait_state(cli_master, eid, "STATE_CANCELED")
    home = tmp_path / "home"
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "DET_MASTER": cli_master.url,
        "DET_USER": "admin",
        "DET_PASS": cli_support.ADMIN_PASSWORD,
    }
    env.pop("NO_COLOR", None)
    argv = [sys.executable, "-m", "det.cli", "experiment", "wait", str(eid)]

    piped = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert piped.returncode == 1
    assert piped.stderr == "" and "\x1b[" not in piped.stdout

    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=secondary, stderr=secondary
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            data = os.read(primary, 4096)
        except OSError:  # the terminal closed
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=60) == 1
    os.close(primary)
    seen = b"".join(chunks).decode(errors="replace")
    assert "[" in seen and "%" in seen, seen  # the bar
    assert "\x1b[33mCANCELED\x1b[0m" in seen  # the state in colour
