from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from det.launch import deepspeed, horovod, torch_distributed
from det.launch.wrap_rank import resolve_rank


def test_torch_distributed_single_container_command() -> None:
    cmd = torch_distributed.build_command(2, ["python3", "train.py"])
    assert cmd[:3] == ["python3", "-m", "torch.distributed.run"]
    assert cmd[cmd.index("--nproc_per_node") + 1] == "2"
    assert cmd[cmd.index("--max_restarts") + 1] == "0"
    assert "--standalone" in cmd
    assert cmd[cmd.index("--module") :] == [
        "--module",
        "det.launch.wrap_rank",
        "RANK",
        "--",
        "python3",
        "train.py",
    ]


def test_torch_distributed_multi_node_command_and_overrides() -> None:
    cmd = torch_distributed.build_command(
        4, ["s.py"], ["--max_restarts", "3"], nnodes=2, node_rank=1, chief_addr="10.0.0.1"
    )
    assert "--standalone" not in cmd
    assert cmd[cmd.index("--rdzv_endpoint") + 1] == "10.0.0.1:29400"
    assert cmd[cmd.index("--node_rank") + 1] == "1"
    # Overrides come after ours, so torchrun takes the last value.
    assert cmd.index("3") > cmd.index("0")


def test_split_args_and_slot_count() -> None:
    assert torch_distributed.split_args(["--a", "1", "--", "python3", "t.py"]) == (
        ["--a", "1"],
        ["python3", "t.py"],
    )
    assert torch_distributed.split_args(["python3", "t.py"]) == ([], ["python3", "t.py"])
    assert torch_distributed.slot_count({"DET_SLOT_IDS": json.dumps(["0", "1", "2"])}) == 3
    assert torch_distributed.slot_count({}) == 1


def test_deepspeed_and_horovod_commands() -> None:
    ds = deepspeed.build_command(2, ["python3", "t.py"])
    assert ds[0] == "deepspeed" and "localhost:0,1" in ds and "--no_python" in ds
    assert ds[ds.index("det.launch.wrap_rank") :] == [
        "det.launch.wrap_rank",
        "RANK",
        "--",
        "python3",
        "t.py",
    ]
    hv = horovod.build_command(3, ["python3", "t.py"], ["--verbose"])
    assert hv[:3] == ["horovodrun", "-np", "3"] and hv[hv.index("-H") + 1] == "localhost:3"
    assert hv.index("--verbose") < hv.index("det.launch.wrap_rank")
    assert "HOROVOD_RANK" in hv


def test_resolve_rank() -> None:
    assert resolve_rank("2", {}) == "2"
    assert resolve_rank("RANK", {"RANK": "5"}) == "5"
    with pytest.raises(ValueError):
        resolve_rank("NOPE", {})


def test_wrap_rank_prefixes_each_stream_and_keeps_the_exit_code() -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "det.launch.wrap_rank",
            "RANK",
            "--",
            "sh",
            "-c",
            "echo a; echo b; echo e >&2; exit 4",
        ],
        env={**os.environ, "RANK": "1"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 4
    assert r.stdout.splitlines() == ["[rank=1] a", "[rank=1] b"]
    assert r.stderr.splitlines() == ["[rank=1] e"]


def test_torch_distributed_runs_one_worker_per_slot() -> None:
    pytest.importorskip("torch")
    script = (
        "import os; print('world', os.environ['WORLD_SIZE'], 'local', os.environ['LOCAL_RANK'])"
    )
    r = subprocess.run(
        [sys.executable, "-m", "det.launch.torch_distributed", "--", sys.executable, "-c", script],
        env={**os.environ, "DET_SLOT_IDS": json.dumps(["0", "1"])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if "world" in ln]
    assert sorted(lines) == ["[rank=0] world 2 local 0", "[rank=1] world 2 local 1"]


def test_torch_distributed_refuses_trial_classes() -> None:
    assert torch_distributed.main(["--trial", "model_def:MyTrial"]) == 2
