"""Metric ingest through the REST API versus a direct COPY into the same PostgreSQL.

8 concurrent reporters, each request 100 steps (``--steps``) x 10 metrics (one row per step),
against a master started from this repository on the embedded database. Prints rows/s for the
API (median of several runs), the ratio to COPY of the same rows and the CPU each costs.

    .venv/bin/python bench/ingest.py [--runs 5] [--requests 40] [--steps 100] [--profile DIR]
        [--floor] [--ceiling]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import orjson
import psutil
import psycopg
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._pg import bench_database
from bench.api_reads import CPU, self_cpu
from bench.user_flood import profile
from det.master import fastjson
from det.master.services import metrics_superseded
from det.master.services import trials as trial_svc
from tests.integration.conftest import start_master

ROOT = Path(__file__).resolve().parents[1]
REPORTERS = 8
STEPS = 100  # steps per request (--steps): the table's figure is for 100
METRICS = 10

CONFIG = """
name: ingest-bench
entrypoint: python3 train.py
searcher: {name: random, metric: loss, max_trials: 8, max_concurrent_trials: 8}
hyperparameters: {lr: {type: double, minval: 0.1, maxval: 1.0}}
"""


def reports(start: int) -> list[dict[str, Any]]:
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


def batch_rows(batch: list[dict[str, Any]]) -> str:
    """The rows of a batch as the master encodes them for its statement (``_BATCH_ROWS``)."""
    return fastjson.dumps(
        [
            {
                "run": r["trialRunId"],
                "grp": r["group"],
                "total": r["stepsCompleted"],
                "body": {"avg_metrics": r["metrics"]["avgMetrics"]},
            }
            for r in batch
        ],
        finite=True,
    )


#: A trial's summary as the floor and the ceiling write it (encoded once, before any clock).
SUMMARY = fastjson.dumps(
    {"avg_metrics": {f"m{k}": {"type": "number", "count": 1, "sum": 1.0, "min": 0.5,
                               "max": 1.0, "last": 1.0} for k in range(METRICS)}},
    finite=True,
)  # fmt: skip


def api_run(
    url: str, token: str, trial_ids: list[int], n_requests: int, *, ceiling: bool = False
) -> float:
    """Each reporter encodes its request and posts it on its own keep-alive connection
    (``ceiling``: to :mod:`bench._ingest_ceiling`'s route for the batch).

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
                f"/t/{tid}/{j}" if ceiling else f"/api/v1/trials/{tid}/metrics/batch",
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


def floor_run(
    db_url: str, trial_ids: list[int], n_requests: int, cpu: CPU, *, copy: bool = False
) -> tuple[float, dict[str, float]]:
    """Rows per second of the database's side of the API path alone, with the master's own work
    taken as free: each reporter's connection sends, for each of its batches, the statements
    the master sends for a training batch (the trial's read for its first, then only the write
    if the row is unchanged: the master knows the row it wrote), the rows and the new summary
    encoded before the clock starts. No master can
    ingest faster than this through these statements on this machine; with the CPU seconds of
    PostgreSQL (read while the connections are open) and of this process.

    ``copy``: the cheapest write PostgreSQL has instead, in one transaction a batch: the trial's
    row read and locked, the rows by COPY (their COPY text made beforehand), the trial's update."""
    bodies = {tid: [batch_rows(reports(j * STEPS)) for j in range(n_requests)] for tid in trial_ids}
    summary = SUMMARY
    conns = {tid: psycopg.connect(db_url, autocommit=True) for tid in trial_ids}
    lines = {
        tid: [
            "".join(
                f"{tid}\t1\ttraining\t{r['stepsCompleted']}\t"
                + json.dumps({"avg_metrics": r["metrics"]["avgMetrics"]})
                + "\n"
                for r in reports(j * STEPS)
            ).encode()
            for j in range(n_requests)
        ]
        for tid in (trial_ids if copy else [])
    }

    def copy_worker(tid: int) -> None:
        conn = conns[tid]
        for j, text in enumerate(lines[tid]):
            with conn.transaction():
                conn.execute(trial_svc._READ_REPORTED + " FOR NO KEY UPDATE OF t", (tid,))
                with conn.cursor().copy(
                    "COPY metrics (trial_id, trial_run_id, metric_group, total_batches, metrics)"
                    " FROM STDIN"
                ) as cp:
                    cp.write(text)
                conn.execute(
                    "UPDATE trials SET summary_metrics = %s::text::jsonb, steps_completed = %s"
                    " WHERE id = %s",
                    (summary, j * STEPS + STEPS - 1, tid),
                )

    def worker(tid: int) -> None:
        conn = conns[tid]
        version = None
        for j, rows in enumerate(bodies[tid]):
            if version is None:  # the master reads the row once; then it knows what it wrote
                row = conn.execute(trial_svc._READ_REPORTED, (tid,)).fetchone()
                assert row is not None
                clean_run, clean_from, version = row[-3:]
            fate = metrics_superseded.plan(
                clean_run, clean_from, {1: (j * STEPS, j * STEPS + STEPS - 1)}
            )
            clean_run, clean_from = fate.clean_run, fate.clean_from
            written = conn.execute(
                trial_svc._WRITE_BATCH_IF_UNCHANGED,
                {
                    "trial": tid,
                    "rows": rows,
                    "summary": summary,
                    "steps": j * STEPS + STEPS - 1,
                    "best": None,
                    "metric": row[7],
                    "larger": row[8],
                    "clean_run": fate.clean_run,
                    "clean_from": fate.clean_from,
                    "version": version,
                },
            ).fetchone()
            if written is None:
                raise RuntimeError(f"trial {tid}: the write found its row changed")
            version = written[0]

    threads = [
        threading.Thread(target=copy_worker if copy else worker, args=(t,)) for t in trial_ids
    ]
    try:
        cpu0 = cpu.read(), self_cpu()
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rate = len(trial_ids) * n_requests * STEPS / (time.perf_counter() - t0)
        used = {"master": 0.0, "postgres": cpu.read() - cpu0[0], "clients": self_cpu() - cpu0[1]}
    finally:
        for c in conns.values():
            c.close()
    return rate, used


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
                )
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
    ap.add_argument(
        "--floor", action="store_true",
        help="also the database's side alone (the master's statements from the reporters' own"
        " connections, its work taken as free): the most any master could reach",
    )  # fmt: skip
    ap.add_argument(
        "--ceiling", action="store_true",
        help="also a front that pays waitress and psycopg but does none of the master's work"
        " (bench/_ingest_ceiling.py): the most a master served by waitress could reach",
    )  # fmt: skip
    ap.add_argument("--ceiling-port", type=int, default=18431)
    ap.add_argument("--ceiling-server", choices=("waitress", "granian"), default="waitress")
    ap.add_argument(
        "--candidates", type=Path, default=None, metavar="DIR",
        help="a directory holding granian (pip's --target): not one of the project's dependencies",
    )  # fmt: skip
    args = ap.parse_args()
    STEPS = args.steps
    api_cpu: list[dict[str, float]] = []
    copy_cpu: list[dict[str, float]] = []
    floor_cpu: list[dict[str, float]] = []
    floor: list[float] = []
    floor_copy: list[float] = []
    floor_copy_cpu: list[dict[str, float]] = []
    ceiling: list[float] = []
    ceiling_cpu: list[dict[str, float]] = []
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
            fronts = start_ceiling(db_url, args) if args.ceiling else []
            ceiling_url = f"http://127.0.0.1:{args.ceiling_port}"
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
                if args.floor:
                    rate, used = floor_run(db_url, ids, args.requests, cpus["postgres"])
                    floor.append(rate)
                    floor_cpu.append(used)
                    rate, used = floor_run(db_url, ids, args.requests, cpus["postgres"], copy=True)
                    floor_copy.append(rate)
                    floor_copy_cpu.append(used)
                if fronts:
                    front_cpu = CPU(*(f.pid for f in fronts))
                    before = {"master": front_cpu.read(), "postgres": cpus["postgres"].read()}
                    before["clients"] = self_cpu()
                    ceiling.append(api_run(ceiling_url, token, ids, args.requests, ceiling=True))
                    used = {"master": front_cpu.read(), "postgres": cpus["postgres"].read()}
                    used["clients"] = self_cpu()
                    ceiling_cpu.append({k: used[k] - before[k] for k in used})
        finally:
            stop(fronts)
            m.kill()
            server.cleanup()
    a, c = statistics.median(api), statistics.median(copy)
    rows = REPORTERS * args.requests * STEPS / 1000
    print(
        f"reporters={REPORTERS} request={STEPS} steps x {METRICS} metrics, runs={args.runs}, API processes={args.processes}"
    )
    print(f"API ingest: median {a:,.0f} rows/s (min {min(api):,.0f}, max {max(api):,.0f})")
    print(f"COPY:       median {c:,.0f} rows/s (min {min(copy):,.0f}, max {max(copy):,.0f})")
    if floor:
        f = statistics.median(floor)
        print(f"floor:      median {f:,.0f} rows/s (min {min(floor):,.0f}, max {max(floor):,.0f})")
        f = statistics.median(floor_copy)
        print(
            f"floor COPY: median {f:,.0f} rows/s"
            f" (min {min(floor_copy):,.0f}, max {max(floor_copy):,.0f})"
        )
    if ceiling:
        f = statistics.median(ceiling)
        print(
            f"ceiling:    median {f:,.0f} rows/s (min {min(ceiling):,.0f},"
            f" max {max(ceiling):,.0f}; {args.ceiling_server}, {args.processes} processes)"
        )
    for name, of_runs in (
        ("API", api_cpu), ("COPY", copy_cpu), ("floor", floor_cpu), ("floor COPY", floor_copy_cpu),
        ("ceiling", ceiling_cpu),
    ):  # fmt: skip
        if not of_runs:
            continue
        per = {k: statistics.median(u[k] for u in of_runs) * 1000 / rows for k in of_runs[0]}
        print(
            f"CPU ms per 1,000 rows, {name + ':':11} "
            + ", ".join(f"{k} {v:.1f}" for k, v in per.items())
            + f" (total {sum(per.values()):.1f})"
        )
    ratios = sorted(x / y for x, y in zip(api, copy, strict=True))
    print(
        f"ratio API/COPY: {a / c:.2f}; of each run and the COPY after it: median"
        f" {statistics.median(ratios):.2f} (min {ratios[0]:.2f}, max {ratios[-1]:.2f})"
        "   (issue 43's goal: >= 0.75x COPY)"
    )
    if floor:
        fr = sorted(x / y for x, y in zip(floor, copy, strict=True))
        print(
            f"ratio floor/COPY (the database's side alone, the master free): median"
            f" {statistics.median(fr):.2f} (min {fr[0]:.2f}, max {fr[-1]:.2f})"
        )
        fr = sorted(x / y for x, y in zip(floor_copy, copy, strict=True))
        print(
            f"ratio floor COPY/COPY (a COPY a batch, the master free): median"
            f" {statistics.median(fr):.2f} (min {fr[0]:.2f}, max {fr[-1]:.2f})"
        )
    if ceiling:
        fr = sorted(x / y for x, y in zip(ceiling, copy, strict=True))
        print(
            f"ratio ceiling/COPY ({args.ceiling_server} and psycopg, none of the master's work):"
            " median"
            f" {statistics.median(fr):.2f} (min {fr[0]:.2f}, max {fr[-1]:.2f})"
        )


def stop(fronts: list[subprocess.Popen[bytes]]) -> None:
    """Each front's process group (granian's workers with it) killed."""
    for f in fronts:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(f.pid, signal.SIGKILL)
        f.wait()


def start_ceiling(db_url: str, args: argparse.Namespace) -> list[subprocess.Popen[bytes]]:
    """The fronts of :mod:`bench._ingest_ceiling` on one port, answering: ``--processes``
    waitress processes, or granian with as many workers."""
    env = dict(os.environ, DET_CEILING=f"{db_url} {args.requests} {STEPS}")
    port = str(args.ceiling_port)
    if args.ceiling_server == "granian":
        if args.candidates:
            env["PYTHONPATH"] = os.pathsep.join(
                filter(None, [str(args.candidates), env.get("PYTHONPATH")])
            )
        fronts = [
            subprocess.Popen(
                [sys.executable, "-m", "granian", "--interface", "wsgi", "--workers",
                 str(args.processes), "--blocking-threads", "16", "--host", "127.0.0.1",
                 "--port", port, "--log-level", "warning", "bench._ingest_ceiling:app"],
                cwd=ROOT, env=env, start_new_session=True,
            )
        ]  # fmt: skip
    else:
        cmd = [sys.executable, "-m", "bench._ingest_ceiling", port]
        fronts = [
            subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
            for _ in range(args.processes)
        ]
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", args.ceiling_port), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline or any(f.poll() is not None for f in fronts):
                stop(fronts)
                raise RuntimeError("the ceiling's fronts did not start") from None
            time.sleep(0.1)
    time.sleep(2.0)  # every front (or worker) listening
    return fronts


if __name__ == "__main__":
    main()
