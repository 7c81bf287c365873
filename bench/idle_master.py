"""What an idle master costs: the CPU of its processes and of its PostgreSQL while nothing
happens (no agent, no experiment, no request), per second, over a window after it settled.

    .venv/bin/python bench/idle_master.py [--runs 3] [--seconds 30] [--settle 10]
        [--set KEY=YAML]

An idle master still runs its control loop every ``tick_seconds`` (every pass reads its tables)
and keeps its listeners (the database's notifications: revocations, the experiment list,
long-polls) waiting. Tests start hundreds of masters that are idle most of their life, and a
serverless instance bills its always-allocated CPU whether or not anything happens. Prints each
run and the medians; compare trees by running it on each, one after the other.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def tree_cpu(pid: int) -> float:
    """CPU-seconds (user + system) of ``pid`` and its live children."""
    import psutil  # a test extra, as in the other benches

    root = psutil.Process(pid)
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def one_run(args: argparse.Namespace, extra: dict[str, Any]) -> tuple[float, float]:
    """(master, PostgreSQL) CPU-ms a second over the window."""
    from bench._pg import bench_database
    from tests.integration.conftest import start_master

    with tempfile.TemporaryDirectory() as tmp:
        server, url = bench_database(Path(tmp))
        m = start_master(Path(tmp), url, extra=extra)
        try:
            time.sleep(args.settle)
            pg = int(server.get_pid() or 0)
            m0, p0 = tree_cpu(m.proc.pid), tree_cpu(pg)
            time.sleep(args.seconds)
            m1, p1 = tree_cpu(m.proc.pid), tree_cpu(pg)
            return (m1 - m0) / args.seconds * 1000, (p1 - p0) / args.seconds * 1000
        finally:
            m.kill()
            server.cleanup()


def main() -> None:
    from bench._pg import master_settings

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--settle", type=float, default=10)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=YAML")
    args = ap.parse_args()
    extra = master_settings(args.set)
    rows = []
    for i in range(args.runs):
        master, pg = one_run(args, extra)
        rows.append((master, pg))
        print(
            f"run {i + 1}: master {master:.1f} CPU-ms/s, PostgreSQL {pg:.1f} CPU-ms/s", flush=True
        )
    print(
        f"median of {len(rows)}: master {statistics.median(r[0] for r in rows):.1f} CPU-ms/s,"
        f" PostgreSQL {statistics.median(r[1] for r in rows):.1f} CPU-ms/s"
        f" ({args.seconds:.0f} s windows after {args.settle:.0f} s; master config:"
        f" {extra or 'defaults'})"
    )


if __name__ == "__main__":
    main()
