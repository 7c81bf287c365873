from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from det.exec.run import (
    choose_workdir,
    entrypoint_argv,
    is_trial_class,
    total_slots,
    trial_class_problem,
)
from tests.unit.harness.fake_master import FakeMaster

#: How a test's child process waits for its signal: in short sleeps, as a training process
#: computes. Not one long ``time.sleep``: a signal that lands after the interpreter's last check
#: for pending handlers and before the sleep's system call starts leaves the Python handler
#: waiting for the whole sleep (seen under load, once in a few hundred runs: the test timed out).
WAIT_FOR_A_SIGNAL = "for _ in range(600):\n    time.sleep(0.1)\n"


def run(
    workdir: Path, *entry: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "DET_WORKDIR": str(workdir), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "det.exec.run", "--", *entry],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_entrypoint_argv() -> None:
    assert entrypoint_argv(["python3 train.py --x"]) == ["sh", "-c", "python3 train.py --x"]
    assert entrypoint_argv(["python3", "train.py"]) == ["python3", "train.py"]
    assert choose_workdir({"DET_WORKDIR": "/w"}, False) == "/w"
    assert choose_workdir({}, True) == "/run/determined/workdir"
    assert choose_workdir({}, False) is None


def test_legacy_trial_class_entrypoints_run_the_official_harness() -> None:
    assert is_trial_class(["model_def:MyTrial"]) and is_trial_class(["pkg.sub.mod:T_2"])
    for not_a_class in (["python3 train.py"], ["a:b c"], ["python3", "m:T"], ["http://x"], [":T"]):
        assert not is_trial_class(not_a_class), not_a_class
    assert entrypoint_argv(["model_def:MyTrial"], "/usr/bin/python3") == [
        "/usr/bin/python3",
        "-m",
        "determined.exec.harness",
        "model_def:MyTrial",
    ]
    assert trial_class_problem({"DET_SLOT_IDS": "[0]"}, True) is None
    assert "determined==0.38.1" in str(trial_class_problem({}, False))
    # More than one slot (issue 38): det's torch launcher around the official harness, one chief.
    assert trial_class_problem({"DET_SLOT_IDS": "[0, 1]"}, True) is None
    assert entrypoint_argv(["model_def:MyTrial"], "/py", total_slots=2) == [
        "/py",
        "-m",
        "det.launch.torch_distributed",
        "--trial",
        "model_def:MyTrial",
    ]
    # A script is never wrapped: its own launcher is the user's choice.
    assert entrypoint_argv(["python3 train.py"], "/py", total_slots=2)[:2] == ["sh", "-c"]


def test_total_slots_counts_every_container_of_the_task() -> None:
    # Two agents with one slot each: this container has one, the trial two.
    two_agents = {"DET_SLOT_IDS": "[0]", "DET_CONTAINER_SLOT_COUNTS": "[1, 1]"}
    assert total_slots(two_agents) == 2
    assert total_slots({"DET_SLOT_IDS": "[0, 1]"}) == 2
    assert total_slots({"DET_SLOT_IDS": "[0]"}) == 1
    assert total_slots({}) == 1
    assert total_slots({"DET_CONTAINER_SLOT_COUNTS": "not json"}) == 1


def test_a_trial_class_without_the_official_package_fails_with_a_clear_line(
    tmp_path: Path,
) -> None:
    # This venv has no `determined` package: the runner says what to install.
    r = run(tmp_path, "model_def:MyTrial")
    assert r.returncode == 2
    assert "needs the official determined package" in r.stderr


def test_runs_in_workdir_and_keeps_the_exit_code(tmp_path: Path) -> None:
    r = run(tmp_path, "pwd; exit 3")
    assert r.returncode == 3
    assert r.stdout.strip() == str(tmp_path)


def test_list_entrypoint_is_not_shell_interpreted(tmp_path: Path) -> None:
    r = run(tmp_path, "echo", "$HOME", ";", "x")
    assert r.stdout.strip() == "$HOME ; x"


def test_startup_hook_exports_reach_the_entrypoint(tmp_path: Path) -> None:
    (tmp_path / "startup-hook.sh").write_text("export HOOKED=yes\necho from-hook\n")
    r = run(tmp_path, "echo hooked=$HOOKED")
    assert r.returncode == 0
    assert r.stdout.split() == ["from-hook", "hooked=yes"]


def test_failing_startup_hook_fails_the_task(tmp_path: Path) -> None:
    (tmp_path / "startup-hook.sh").write_text("false\necho not-reached\n")
    r = run(tmp_path, "echo entrypoint-ran")
    assert r.returncode == 1
    assert "entrypoint-ran" not in r.stdout and "not-reached" not in r.stdout
    assert "startup-hook.sh failed" in r.stderr


def test_sigterm_is_forwarded_to_the_entrypoint(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n"
        "print('ready', flush=True)\n"
        f"{WAIT_FOR_A_SIGNAL}"
    )
    with subprocess.Popen(
        [sys.executable, "-m", "det.exec.run", "--", sys.executable, str(script)],
        env={**os.environ, "DET_WORKDIR": str(tmp_path)},
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 7


def test_writes_the_official_task_info_files_for_the_task_duration(
    tmp_path: Path, master: FakeMaster
) -> None:
    info_dir = tmp_path / "run" / "info"
    env = master.task_env(config={"debug": False}, DET_INFO_DIR=str(info_dir))
    r = run(tmp_path, f"cp -r {info_dir} {tmp_path / 'seen'}", env=env)
    assert r.returncode == 0, r.stderr
    seen = tmp_path / "seen"
    cluster = json.loads((seen / "cluster.json").read_text())
    assert cluster["allocation_id"] == "3.1.1" and cluster["slot_ids"] == [0]
    trial = json.loads((seen / "trial.json").read_text())
    assert trial["trial_id"] == 11 and trial["hparams"] == {"lr": 0.1}
    rdzv = json.loads((seen / "rendezvous.json").read_text())
    assert rdzv == {
        "container_addrs": ["127.0.0.1"],
        "container_rank": 0,
        "container_slot_counts": [1],
    }
    assert not (tmp_path / "run").exists()  # files and the directories we made are gone


def test_the_official_rendezvous_file_names_every_container_of_the_gang(
    tmp_path: Path, master: FakeMaster
) -> None:
    """The master tells each container of a two-agent trial the gang (services.rendezvous);
    the official package reads it from rendezvous.json (its launcher: nodes, node rank)."""
    info_dir = tmp_path / "run" / "info"
    env = master.task_env(
        config={"debug": False},
        DET_INFO_DIR=str(info_dir),
        DET_CONTAINER_ADDRS='["10.0.0.5", "10.0.0.6"]',
        DET_CONTAINER_RANK="1",
        DET_CONTAINER_SLOT_COUNTS="[1, 1]",
    )
    r = run(tmp_path, f"cp -r {info_dir} {tmp_path / 'seen'}", env=env)
    assert r.returncode == 0, r.stderr
    rdzv = json.loads((tmp_path / "seen" / "rendezvous.json").read_text())
    assert rdzv == {
        "container_addrs": ["10.0.0.5", "10.0.0.6"],
        "container_rank": 1,
        "container_slot_counts": [1, 1],
    }


def test_every_entrypoint_gets_its_allocations_launcher_ports(tmp_path: Path) -> None:
    """Finding 9: Determined's launcher binds C10D_PORT (29400 unless set) and its Core API
    INTER_TRAIN_PROCESS_COMM_PORT_1/2 (12360/12376): the same in every task of a host. Each
    allocation's are its own (from DET_UNIQUE_PORT_OFFSET); a value the user set wins."""
    names = "C10D_PORT INTER_TRAIN_PROCESS_COMM_PORT_1 INTER_TRAIN_PROCESS_COMM_PORT_2"
    show = f"for v in {names}; do printenv $v; done"
    r = run(tmp_path, show, env={"DET_UNIQUE_PORT_OFFSET": "7"})
    assert r.stdout.split() == ["29407", "14367", "15367"], r.stderr
    r = run(tmp_path, show, env={"DET_UNIQUE_PORT_OFFSET": "7", "C10D_PORT": "31000"})
    assert r.stdout.split()[0] == "31000"


@pytest.mark.parametrize("save_seconds", [0, 1])
def test_sigterm_reaches_a_process_under_a_shell_entrypoint_which_the_wrapper_waits_for(
    tmp_path: Path, save_seconds: int
) -> None:
    # The shell dies of the signal at once; the training process then saves (a checkpoint on
    # preemption: here for a second, or at once). As a container's PID 1, a wrapper that
    # returned with the shell would end the container, and the kernel would kill the save.
    script = tmp_path / "child.py"
    script.write_text(
        "import pathlib, signal, sys, time\n"
        "def stop(*a):\n"
        f"    time.sleep({save_seconds})\n"
        "    pathlib.Path('saved').write_text('1')\n"
        "    sys.exit(7)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('ready', flush=True)\n"
        f"{WAIT_FOR_A_SIGNAL}"
    )
    # A compound command: the shell cannot exec python, which stays its child.
    entry = f"{sys.executable} child.py; sleep 60"
    with subprocess.Popen(
        [sys.executable, "-m", "det.exec.run", "--", entry],
        env={**os.environ, "DET_WORKDIR": str(tmp_path)},
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM  # the shell's status
        assert (tmp_path / "saved").read_text() == "1"


def test_trials_with_the_official_package_load_checkpoints_as_before_torch_2_6() -> None:
    from det.exec.run import TORCH_NO_WEIGHTS_ONLY, with_official_torch_loads

    trial = {"DET_TASK_TYPE": "TRIAL"}
    assert with_official_torch_loads(trial, True)[TORCH_NO_WEIGHTS_ONLY] == "1"
    # the user's own choice wins; other tasks and images without the package are untouched
    mine = {**trial, TORCH_NO_WEIGHTS_ONLY: "0"}
    assert with_official_torch_loads(mine, True) == mine
    assert with_official_torch_loads(trial, False) == trial
    command = {"DET_TASK_TYPE": "COMMAND"}
    assert with_official_torch_loads(command, True) == command
