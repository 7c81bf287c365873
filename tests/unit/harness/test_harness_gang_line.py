"""The line a container of a trial spanning machines logs: its rank, its own address, the
chief's and its ports (issue 39: the trial's log shows where each rank ran)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from det.launch import ports


def gang(addrs: list[str], rank: int, offset: int = 7) -> dict[str, str]:
    env = {
        "DET_CONTAINER_ADDRS": json.dumps(addrs),
        "DET_CONTAINER_RANK": str(rank),
        "DET_UNIQUE_PORT_OFFSET": str(offset),
    }
    return ports.with_ports(env)


def test_each_container_names_its_own_address_and_the_chiefs() -> None:
    line = ports.gang_line(gang(["10.0.0.2", "10.0.0.3"], 1))
    assert line is not None
    assert line.startswith("container rank 1 of 2 at 10.0.0.3, chief at 10.0.0.2: ")
    assert "C10D_PORT=29407" in line and "INTER_TRAIN_PROCESS_COMM_PORT_1=14367" in line


def test_one_container_or_an_unreadable_gang_logs_nothing() -> None:
    assert ports.gang_line(gang(["10.0.0.2"], 0)) is None
    assert ports.gang_line({}) is None
    assert ports.gang_line({"DET_CONTAINER_ADDRS": "not json"}) is None
    assert ports.gang_line(gang(["10.0.0.2", "10.0.0.3"], 5)) is None


def test_det_exec_run_prints_it_before_the_entrypoint() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env.update(
        DET_CONTAINER_ADDRS='["10.0.0.2", "10.0.0.3"]',
        DET_CONTAINER_RANK="0",
        DET_UNIQUE_PORT_OFFSET="3",
    )
    p = subprocess.run(
        [sys.executable, "-m", "det.exec.run", "--", sys.executable, "-c", "print('ran')"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "det.exec.run: container rank 0 of 2 at 10.0.0.2, chief at 10.0.0.2: " in p.stderr
    assert p.stdout.strip() == "ran"
