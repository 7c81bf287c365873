"""What an idle master costs: the CPU of its processes and of its PostgreSQL while nothing
happens (no experiment, no request), per second, over a window after it settled; with
``--agents N``, also N real agents (artificial CPU slots, no container) and the Docker engine's
share (dockerd and containerd: the agents ask it about their containers).

    .venv/bin/python bench/idle_master.py [--runs 3] [--seconds 30] [--settle 10]
        [--agents 0] [--set KEY=YAML]

An idle master still runs its control loop every ``tick_seconds`` (every pass reads its tables)
and keeps its listeners (the database's notifications: revocations, the experiment list,
long-polls) waiting. Tests start hundreds of masters that are idle most of their life, and a
serverless instance bills its always-allocated CPU whether or not anything happens. Prints each
run and the medians; compare trees by running it on each, one after the other.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def tree_cpu(pid: int) -> float:
    """CPU-seconds (user + system) of ``pid`` and its live children."""
    from bench.api_reads import CPU  # psutil's tree walk, shared with the other benches

    return CPU(pid).read()


def engine_cpu() -> float:
    """CPU-seconds of the machine's dockerd and containerd."""
    import psutil

    total = 0.0
    for p in psutil.process_iter(["name"]):
        if p.info["name"] in ("dockerd", "containerd"):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def one_run(args: argparse.Namespace, extra: dict[str, Any]) -> dict[str, float]:
    """CPU-ms a second over the window: the master, PostgreSQL, the agents, the engine."""
    from bench._pg import bench_database
    from tests.integration.conftest import start_master

    with tempfile.TemporaryDirectory() as tmp:
        server, url = bench_database(Path(tmp))
        m = start_master(Path(tmp), url, extra=extra)
        agents: list[subprocess.Popen[bytes]] = []
        try:
            for i in range(args.agents):
                state = Path(tmp) / f"agent-{i}"
                state.mkdir()
                argv = [
                    sys.executable, "-m", "det.agent", "--master-url", m.url,
                    "--agent-id", f"idle-{i}", f"--agent-token={m.agent_token}",
                    "--slot-type", "cpu", "--artificial-slots", "2",
                    "--state-dir", str(state),
                ]  # fmt: skip
                agents.append(
                    subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                )
            time.sleep(args.settle)
            pg = int(server.get_pid() or 0)

            def sample() -> dict[str, float]:
                return {
                    "master": tree_cpu(m.proc.pid),
                    "PostgreSQL": tree_cpu(pg),
                    "agents": sum(tree_cpu(a.pid) for a in agents),
                    "engine": engine_cpu() if agents else 0.0,
                }

            before = sample()
            time.sleep(args.seconds)
            after = sample()
            return {k: (after[k] - before[k]) / args.seconds * 1000 for k in before}
        finally:
            for a in agents:
                a.kill()
                a.wait()
            m.kill()
            server.cleanup()


def main() -> None:
    from bench._pg import master_settings

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--settle", type=float, default=10)
    ap.add_argument("--agents", type=int, default=0, help="real agents (needs Docker)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=YAML")
    args = ap.parse_args()
    extra = master_settings(args.set)
    rows = []
    for i in range(args.runs):
        rows.append(one_run(args, extra))
        shown = ", ".join(f"{k} {v:.1f}" for k, v in rows[-1].items() if args.agents or v)
        print(f"run {i + 1}: {shown} CPU-ms/s", flush=True)
    medians = ", ".join(
        f"{k} {statistics.median(r[k] for r in rows):.1f}"
        for k in rows[0]
        if args.agents or k in ("master", "PostgreSQL")
    )
    print(
        f"median of {len(rows)}: {medians} CPU-ms/s ({args.seconds:.0f} s windows after"
        f" {args.settle:.0f} s; {args.agents} agent(s); master config: {extra or 'defaults'})"
    )


if __name__ == "__main__":
    main()
