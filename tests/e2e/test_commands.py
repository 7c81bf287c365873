"""Commands on a real cluster (master, agent, Docker): ``det cmd run`` streams the output and
exits with the command's code, through our CLI and Determined's; a command is a job and a task
like a trial, waits in the queue, is preempted by higher-priority work and killed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from tests.compat.official import ensure_official_venv
from tests.e2e.cluster import Cluster, cluster_factory, wait_for
from tests.integration.conftest import ADMIN_PASSWORD

pytestmark = pytest.mark.e2e
__all__ = ["cluster_factory"]


def det(c: Cluster, *args: str, official: bool = False) -> subprocess.CompletedProcess[str]:
    """``det ARGS`` (ours, or the official client's) logged in as admin; never raises."""
    env = {
        **os.environ,
        "HOME": str(c.tmp / ("home-official" if official else "home")),
        "DET_MASTER": c.master.url,
        "DET_USER": "admin",
        "DET_PASS": ADMIN_PASSWORD,
    }
    argv = [str(ensure_official_venv() / "det")] if official else [sys.executable, "-m", "det.cli"]
    return subprocess.run(
        [*argv, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def command(c: Cluster, cid: str) -> dict[str, Any]:
    return dict(c.master.get(f"/api/v1/commands/{cid}")["command"])


#: A command that runs until it is stopped and ends on the SIGTERM of a kill or a preemption, as
#: a real program does. A bare ``sleep`` is the container's PID 1, which the kernel shields from
#: a signal it has no handler for: each stop waited out the 10 s kill grace for Docker's SIGKILL
#: (that path: tests/integration/test_agent_docker.py).
SLEEPER = ["sh", "-c", "trap 'exit 143' TERM; sleep 600 & wait"]


def launch(c: Cluster, entrypoint: list[str], **config: Any) -> str:
    body = {"config": {"entrypoint": entrypoint, **config}}
    return str(c.master.post("/api/v1/commands", body)["command"]["id"])


def test_cmd_run_prints_output_and_exits_with_its_code(shared_one_slot: Cluster) -> None:
    c = shared_one_slot
    before = {i["id"] for i in c.master.get("/api/v1/commands")["commands"]}  # the cluster's
    ok = det(c, "cmd", "run", "python3", "-c", "print(6*7)")
    assert ok.returncode == 0, f"{ok.stdout}\n{ok.stderr}\n{c.dump()}"
    assert "42" in ok.stdout.splitlines(), ok.stdout
    failed = det(c, "cmd", "run", "sh", "-c", "echo bye; exit 3")
    assert failed.returncode == 3, f"{failed.stdout}\n{failed.stderr}"
    assert "bye" in failed.stdout
    listed = det(c, "cmd", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    import json

    mine = [i for i in json.loads(listed.stdout) if i["id"] not in before]
    states = {i["description"]: (i["state"], i["exitStatus"]) for i in mine}
    assert sorted(s for s, _ in states.values()) == ["STATE_TERMINATED", "STATE_TERMINATED"]
    assert sorted(x for _, x in states.values()) == ["exited with code 0", "exited with code 3"]


def test_one_argument_is_a_shell_command_line(shared_one_slot: Cluster) -> None:
    """As in Determined: `det cmd run 'a && b'` runs its one argument through /bin/sh -c (it
    was exec'd as a program named 'a && b' before); several arguments are exec'd as given."""
    c = shared_one_slot
    for official in (False, True):
        r = det(c, "cmd", "run", "echo one && echo two; exit 4", official=official)
        # det's CLI exits with the command's code; the official one exits 0 once the log ends.
        assert r.returncode == (0 if official else 4), f"{r.stdout}\n{r.stderr}\n{c.dump()}"
        assert [x for x in r.stdout.splitlines() if x in ("one", "two")] == ["one", "two"]
    exec_d = det(c, "cmd", "run", "echo", "a && b")
    assert exec_d.returncode == 0, exec_d.stderr
    assert "a && b" in exec_d.stdout.splitlines(), exec_d.stdout


def test_context_config_and_work_dir_reach_the_container(shared_one_slot: Cluster) -> None:
    c = shared_one_slot
    ctx = c.tmp / "ctx"
    (ctx / "sub").mkdir(parents=True)
    (ctx / "sub" / "hello.py").write_text(
        "import os\nprint('from', os.getcwd(), os.environ['X'])\n"
    )
    r = det(
        c,
        "cmd",
        "run",
        "-c",
        str(ctx),
        "--config",
        "work_dir=/run/determined/workdir/sub",
        "--config",
        "environment.environment_variables=[X=hi]",
        "python3",
        "hello.py",
    )
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{c.dump()}"
    assert "from /run/determined/workdir/sub hi" in r.stdout


def test_command_is_a_task_and_a_job_and_is_killed(shared_one_slot: Cluster) -> None:
    c = shared_one_slot
    cid = launch(c, SLEEPER, description="sleeper")
    wait_for(lambda: command(c, cid)["state"] == "STATE_RUNNING", 120, "the command to run")
    tasks = c.master.get("/api/v1/tasks")["allocationIdToSummary"]
    mine = [t for t in tasks.values() if t["taskId"] == cid]
    assert [t["name"] for t in mine] == ["sleeper"]
    jobs = [j["full"] for j in c.master.get("/api/v1/job-queues-v2")["jobs"]]
    job = next(j for j in jobs if j["entityId"] == cid)
    assert (job["type"], job["name"], job["allocatedSlots"]) == ("TYPE_COMMAND", "sleeper", 1)
    out = det(c, "task", "list")
    assert out.returncode == 0 and cid in out.stdout, out.stderr
    official = det(c, "task", "list", official=True)
    assert official.returncode == 0 and cid in official.stdout, official.stdout + official.stderr
    killed = det(c, "cmd", "kill", cid)
    assert killed.returncode == 0, killed.stderr
    wait_for(lambda: command(c, cid)["state"] == "STATE_TERMINATED", 60, "the kill")
    assert command(c, cid)["exitStatus"] == "killed"
    assert not any(
        j["full"]["entityId"] == cid for j in c.master.get("/api/v1/job-queues-v2")["jobs"]
    )


def test_commands_queue_and_are_preempted_by_higher_priority_work(
    cluster_factory: Callable[..., Cluster],
) -> None:
    c = cluster_factory(
        agents=1,
        slots=1,
        extra={"resource_manager": {"scheduler": {"type": "priority", "preemption": True}}},
    )
    low = launch(c, SLEEPER, resources={"priority": 50})
    wait_for(lambda: command(c, low)["state"] == "STATE_RUNNING", 120, "the low-priority command")
    high = launch(c, ["sh", "-c", "echo high"], resources={"priority": 10})
    wait_for(lambda: command(c, high)["state"] == "STATE_TERMINATED", 120, "the urgent command")
    assert command(c, high)["exitCode"] == 0
    # The preempted command was queued again and runs once the slot is free.
    wait_for(lambda: command(c, low)["state"] == "STATE_RUNNING", 120, "the low one to run again")
    allocations = [
        t["allocationId"]
        for t in c.master.get("/api/v1/tasks")["allocationIdToSummary"].values()
        if t["taskId"] == low
    ]
    assert allocations == [f"{low}.2"]
    c.master.post(f"/api/v1/commands/{low}/kill")


def test_official_cli_runs_a_command(shared_one_slot: Cluster) -> None:
    c = shared_one_slot
    r = det(c, "cmd", "run", "python3", "-c", "print(6*7)", official=True)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    assert "42" in r.stdout, r.stdout
    listed = det(c, "cmd", "list", official=True)
    assert listed.returncode == 0, listed.stderr
    tasks = det(c, "task", "list", official=True)
    assert tasks.returncode == 0, tasks.stderr


def test_tasks_and_trials_share_the_queue_and_preempt_each_other_by_priority(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """With the priority scheduler, a command of lower priority than a running trial waits in
    the job queue (queued, its job listed) until the slot is free; one of higher priority
    preempts the trial, which runs again once the command is done."""
    from pathlib import Path

    c = cluster_factory(
        agents=1,
        slots=1,
        extra={"resource_manager": {"scheduler": {"type": "priority", "preemption": True}}},
    )
    core = Path(__file__).resolve().parents[2] / "examples" / "core_api"
    eid = c.create(
        core / "single.yaml",
        core,
        {
            "hyperparameters": {
                "report_every": 50,
                "validate_every": 5000,
                "checkpoint_every": 5000,
                "batch_seconds": 0.01,  # it holds the slot asleep, not spinning a core
            },
            "searcher": {"max_length": {"batches": 5_000_000}},
            "resources": {"priority": 50},
        },
    )

    def trial() -> dict[str, Any]:
        trials = c.trials(eid)
        return trials[0] if trials else {}

    wait_for(lambda: trial().get("state") == "STATE_RUNNING", 180, "the trial to run")
    waiting = launch(c, ["sh", "-c", "echo waited"], resources={"priority": 60})
    for _ in range(5):  # it stays queued behind the trial (sampled, not timed)
        assert command(c, waiting)["state"] == "STATE_QUEUED"
        jobs = [j["full"] for j in c.master.get("/api/v1/job-queues-v2")["jobs"]]
        job = next(j for j in jobs if j["entityId"] == waiting)
        assert job["summary"]["state"] == "STATE_QUEUED", job
        wait_for(lambda: trial().get("state") == "STATE_RUNNING", 30, "the trial still running")
    urgent = launch(c, ["sh", "-c", "echo urgent"], resources={"priority": 10})
    wait_for(lambda: command(c, urgent)["state"] == "STATE_TERMINATED", 180, "the urgent command")
    assert command(c, urgent)["exitCode"] == 0
    # The trial was preempted for it (a new allocation) and runs again; the waiting one waits.
    task_id = trial()["taskId"]
    wait_for(
        lambda: (
            len(c.master.get(f"/api/v1/tasks/{task_id}")["task"]["allocations"]) >= 2
            and trial().get("state") == "STATE_RUNNING"
        ),
        180,
        "the trial to run again",
    )
    assert command(c, waiting)["state"] == "STATE_QUEUED"
    c.master.post(f"/api/v1/experiments/{eid}/kill")
    wait_for(lambda: command(c, waiting)["state"] == "STATE_TERMINATED", 180, "the waiting one")
    assert command(c, waiting)["exitCode"] == 0
