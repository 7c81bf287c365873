from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from det.launch import deepspeed, horovod, ports, torch_distributed
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
    # Static rendezvous at the chief container: node ranks are the containers' (c10d's dynamic
    # one numbers nodes as they arrive, and global rank 0 could be in any container).
    assert "--rdzv_backend" not in cmd and "--rdzv_endpoint" not in cmd
    assert cmd[cmd.index("--master_addr") + 1] == "10.0.0.1"
    assert cmd[cmd.index("--master_port") + 1] == "29400"
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


def test_torch_distributed_runs_one_worker_per_slot(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = (
        "import os; print('world', os.environ['WORLD_SIZE'], 'local', os.environ['LOCAL_RANK'])"
    )
    r = subprocess.run(
        [sys.executable, "-m", "det.launch.torch_distributed", "--", sys.executable, "-c", script],
        # TMPDIR: torch's launcher makes a torchelastic_* directory there and never removes it.
        env={**os.environ, "DET_SLOT_IDS": json.dumps(["0", "1"]), "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if "world" in ln]
    assert sorted(lines) == ["[rank=0] world 2 local 0", "[rank=1] world 2 local 1"]


def test_torch_distributed_runs_a_trial_class_under_the_official_harness() -> None:
    assert torch_distributed.parse_trial(["--trial", "model_def:MyTrial"]) == "model_def:MyTrial"
    assert torch_distributed.parse_trial(["python3", "t.py"]) is None
    assert torch_distributed.trial_script("model_def:MyTrial", "/py") == [
        "/py",
        "-m",
        "determined.exec.harness",
        "model_def:MyTrial",
    ]
    # --trial takes one trial class and nothing after it
    assert torch_distributed.main(["--trial", "model_def:MyTrial", "extra"]) == 2
    assert torch_distributed.main(["--trial"]) == 2


def test_allocations_of_one_host_never_share_a_port() -> None:
    """Finding 9: every port a launcher or Core API binds is a base plus the allocation's
    DET_UNIQUE_PORT_OFFSET (unique per host among live allocations), the bases 1,000 apart: for
    any two offsets, the two allocations' ports are disjoint, and one allocation's are distinct."""
    from det.core._distributed import DEFAULT_PORT

    def all_ports(offset: int) -> list[int]:
        det_core = [DEFAULT_PORT + offset]  # its global group (local ones: kernel-chosen)
        return det_core + [int(v) for v in ports.port_env(offset).values()]

    seen: dict[int, int] = {}
    for offset in range(ports.OFFSETS):
        mine = all_ports(offset)
        assert len(set(mine)) == len(mine), offset
        for p in mine:
            assert p not in seen, f"port {p}: offsets {seen.get(p)} and {offset}"
            seen[p] = offset
            assert p < 32768, p  # below Linux's ephemeral range: no outgoing socket takes it
    assert ports.port_env(0)["C10D_PORT"] == "29400"
    assert ports.c10d_port({"DET_UNIQUE_PORT_OFFSET": "12"}) == 29412
    assert ports.c10d_port({"C10D_PORT": "31000", "DET_UNIQUE_PORT_OFFSET": "12"}) == 31000
    assert ports.with_ports({"C10D_PORT": "1"})["C10D_PORT"] == "1"  # the user's wins
