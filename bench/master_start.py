"""What a test's master start costs: a fresh ``python -m det.master`` against a fork of the
tests' pre-imported fork server (tests/master_fork.py).

Each round starts ``--masters`` masters one after the other on one migrated database (a
private PostgreSQL from ``pgserver``), waits for each to answer ``/info``, reads the CPU its
process used up to then, stops it with SIGTERM, and prints per mode the medians over masters of
the wall time to ``/info`` and the master's CPU-seconds; the figures of ``--rounds`` rounds are
printed one line each (the modes alternate within a round).

    .venv/bin/python bench/master_start.py [--masters 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._pg import bench_database
from det.master import db
from tests import master_fork
from tests.ports import free_port


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _one(tmp: Path, db_url: str, i: int) -> tuple[float, float]:
    port = free_port()
    config = {
        "port": port,
        "bind_address": "127.0.0.1",
        "data_dir": str(tmp / f"data{i}"),
        "db": {"url": db_url},
        "security": {"initial_user_password": "bench-Passw0rd"},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp / "ckpt")},
    }
    conf = tmp / f"m{i}.yaml"
    conf.write_text(yaml.safe_dump(config))
    t0 = time.monotonic()
    proc = master_fork.start(["--config-file", str(conf)], dict(os.environ), str(tmp / f"m{i}.log"))
    while True:
        try:
            if requests.get(f"http://127.0.0.1:{port}/info", timeout=1).status_code == 200:
                break
        except requests.RequestException:
            pass
        if proc.poll() is not None:
            raise SystemExit((tmp / f"m{i}.log").read_text())
        time.sleep(0.02)
    wall = time.monotonic() - t0
    cpu = _cpu_seconds(proc.pid)
    proc.terminate()
    proc.wait(30)
    return wall, cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--masters", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="det-bench-start-") as d:
        tmp = Path(d)
        server, url = bench_database(tmp)
        db.upgrade(url)
        modes = {"fresh interpreter": "0", "fork server": "1"}
        for r in range(args.rounds):
            line = []
            for name, flag in modes.items():
                os.environ["DET_TEST_MASTER_FORK"] = flag
                runs = [_one(tmp, url, r * 1000 + i) for i in range(args.masters)]
                wall = statistics.median(w for w, _ in runs)
                cpu = statistics.median(c for _, c in runs)
                line.append(f"{name}: to /info {wall:.2f} s, {cpu:.2f} CPU-s")
            print(f"round {r + 1}: " + "; ".join(line), flush=True)
        server.cleanup()


if __name__ == "__main__":
    main()
