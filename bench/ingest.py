"""Metric ingest through the REST API versus a direct COPY into the same PostgreSQL.

8 concurrent reporters, each request 100 steps (``--steps``) x 10 metrics (one row per step),
against a master started from this repository on the embedded database. Prints rows/s for the
API (median of several runs), the ratio to COPY of the same rows and the CPU each costs.

    .venv/bin/python bench/ingest.py [--runs 5] [--requests 40] [--steps 100] [--profile DIR]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import orjson
import psutil
import psycopg
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._pg import bench_database
from bench.api_reads import CPU, self_cpu
from bench.user_flood import profile
from tests.integration.conftest import start_master

REPORTERS = 8
STEPS = 100  # steps per request (--steps): the table's figure is for 100
METRICS = 10

CONFIG = """
name: ingest-bench
entrypoint: python3 train.py
searcher: {name: random, metric: loss, max_trials: 8, max_concurrent_trials: 8}
hyperparameters: {lr: {type: double, minval: 0.1, maxval: 1.0}}
"""


def reports(start: int) -> list[dict[str, object]]:
    return [
        {
            "group": "training",
            "trialRunId": 1,
            "stepsCompleted": start + i,
            "metrics": {
                "avgMetrics": {f"m{k}": (start + i) * 0.001 * (k + 1) for k in range(METRICS)}
            },
        }
        for i in range(STEPS)
    ]


def api_run(url: str, token: str, trial_ids: list[int], n_requests: int) -> float:
    """Each reporter encodes its request and posts it on its own keep-alive connection.

    The reporters share these 2 cores with the master and PostgreSQL, so they use a lean
    client (http.client, orjson) to leave the cores to what is measured; a real reporter runs
    on its trial's machine.
    """
    parsed = urllib.parse.urlsplit(url)

    def worker(tid: int) -> None:
        conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        for j in range(n_requests):
            conn.request(
                "POST",
                f"/api/v1/trials/{tid}/metrics/batch",
                body=orjson.dumps({"reports": reports(j * STEPS)}),
                headers=headers,
            )
            resp = conn.getresponse()
            text = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"report failed: {resp.status} {text[:200]!r}")
        conn.close()

    threads = [threading.Thread(target=worker, args=(t,)) for t in trial_ids]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return REPORTERS * n_requests * STEPS / (time.perf_counter() - t0)


def copy_run(db_url: str, trial_ids: list[int], n_requests: int) -> tuple[float, dict[str, float]]:
    """Rows per second of one COPY of the rows the API run wrote, and the CPU seconds of its
    PostgreSQL backend and of this process while it ran (the backend exits with its
    connection, so its CPU is read before that)."""
    rows = []
    for tid in trial_ids:
        for j in range(n_requests):
            for r in reports(j * STEPS):
                rows.append(
                    (
                        tid,
                        1,
                        "training",
                        r["stepsCompleted"],
                        json.dumps({"avg_metrics": r["metrics"]["avgMetrics"]}),
                    )
                )  # type: ignore[index]
    with psycopg.connect(db_url) as conn:
        backend = psutil.Process(conn.info.backend_pid)
        cpu0 = sum(backend.cpu_times()[:2]), self_cpu()
        t0 = time.perf_counter()
        with (
            conn.cursor() as cur,
            cur.copy(
                "COPY metrics (trial_id, trial_run_id, metric_group, total_batches, metrics) FROM STDIN"
            ) as copy,
        ):
            for row in rows:
                copy.write_row(row)
        conn.commit()
        rate = len(rows) / (time.perf_counter() - t0)
        used = {
            "master": 0.0,
            "postgres": sum(backend.cpu_times()[:2]) - cpu0[0],
            "clients": self_cpu() - cpu0[1],
        }
        return rate, used


def main() -> None:
    global STEPS
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--processes", type=int, default=2, help="master API processes")
    ap.add_argument("--requests", type=int, default=40, help="requests per reporter per run")
    ap.add_argument(
        "--steps", type=int, default=STEPS,
        help="steps per request (the harness sends up to 500 when reports queue up)",
    )  # fmt: skip
    ap.add_argument(
        "--profile", type=Path, default=None, metavar="DIR",
        help="py-spy (--gil) of each master process during 2 s of each API run (with --requests 150)",
    )  # fmt: skip
    args = ap.parse_args()
    STEPS = args.steps
    api_cpu: list[dict[str, float]] = []
    copy_cpu: list[dict[str, float]] = []
    if args.profile:  # the venv's py-spy
        os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]

    with tempfile.TemporaryDirectory() as tmp:
        server, db_url = bench_database(Path(tmp))
        m = start_master(Path(tmp), db_url, extra={"api_processes": args.processes})
        try:
            token = m.login()
            s = requests.Session()
            s.headers["Authorization"] = f"Bearer {token}"
            eid = s.post(
                f"{m.url}/api/v1/experiments", json={"config": CONFIG, "activate": True}, timeout=30
            ).json()["experiment"]["id"]
            deadline = time.monotonic() + 30
            while True:
                trials = s.get(f"{m.url}/api/v1/experiments/{eid}/trials", timeout=30).json()[
                    "trials"
                ]
                if len(trials) >= REPORTERS or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            ids = [t["id"] for t in trials][:REPORTERS]
            assert len(ids) == REPORTERS, "the searcher did not create the trials"
            # Alternating, so that each API run and the COPY run after it see about the same
            # load from whatever else shares the machine; the ratio is the median of the pairs'.
            # CPU seconds of the master's processes, PostgreSQL's and this process (the clients)
            # per 1,000 rows: the figure that survives other load on the machine.
            cpus = {"master": CPU(m.proc.pid), "postgres": CPU(int(server.get_pid() or 0))}
            api, copy = [], []
            for run in range(args.runs):
                spies = profile(m.proc.pid, 2, args.profile / f"run{run}") if args.profile else []
                before = {k: c.read() for k, c in cpus.items()} | {"clients": self_cpu()}
                api.append(api_run(m.url, token, ids, args.requests))
                used = {k: c.read() for k, c in cpus.items()} | {"clients": self_cpu()}
                api_cpu.append({k: used[k] - before[k] for k in used})
                for p in spies:
                    p.wait(60)
                rate, used = copy_run(db_url, ids, args.requests)
                copy.append(rate)
                copy_cpu.append(used)
        finally:
            m.kill()
            server.cleanup()
    a, c = statistics.median(api), statistics.median(copy)
    rows = REPORTERS * args.requests * STEPS / 1000
    print(
        f"reporters={REPORTERS} request={STEPS} steps x {METRICS} metrics, runs={args.runs}, API processes={args.processes}"
    )
    print(f"API ingest: median {a:,.0f} rows/s (min {min(api):,.0f}, max {max(api):,.0f})")
    print(f"COPY:       median {c:,.0f} rows/s (min {min(copy):,.0f}, max {max(copy):,.0f})")
    for name, used in (("API", api_cpu), ("COPY", copy_cpu)):
        per = {k: statistics.median(u[k] for u in used) * 1000 / rows for k in used[0]}
        print(
            f"CPU ms per 1,000 rows, {name + ':':5} "
            + ", ".join(f"{k} {v:.1f}" for k, v in per.items())
            + f" (total {sum(per.values()):.1f})"
        )
    ratios = sorted(x / y for x, y in zip(api, copy, strict=True))
    print(
        f"ratio API/COPY: {a / c:.2f}; of each run and the COPY after it: median"
        f" {statistics.median(ratios):.2f} (min {ratios[0]:.2f}, max {ratios[-1]:.2f})"
        "   (issue 43's goal: >= 0.75x COPY)"
    )


if __name__ == "__main__":
    main()
