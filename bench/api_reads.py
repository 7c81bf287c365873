"""Read throughput of the master's API beside a bare Flask + waitress app in the same run.

Starts a master (private PostgreSQL from ``pgserver``, no agents) with ``--experiments``
paused experiments (default 1,000), one of them with 100 trials, and one trial with a
``--steps``-step series of 10 training metrics; then, for each read, ``--threads`` client threads
(keep-alive sessions, logged in) call it for ``--seconds`` and the bench prints requests per
second, p50 and p99. The reference is a "hello" Flask app served by waitress with the master's
thread count, measured the same way in the same run, so the figures can be compared across
machines. The metric series read is shown beside the same rows read by an indexed SELECT through
psycopg (one client, medians of ``--runs``).

    .venv/bin/python bench/api_reads.py [--runs 3] [--seconds 5] [--threads 16] [--set KEY=YAML]

``--set`` adds a key to the master's config (``--set user_api_processes=2``).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import requests
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.conftest import start_master

CONFIG = """
name: reads-{i}
description: an experiment of the read bench
labels: [bench, reads]
entrypoint: python3 train.py
searcher: {{name: random, metric: validation_loss, max_trials: {trials}, max_length: 100}}
hyperparameters:
  lr: {{type: log, base: 10, minval: -4, maxval: -1}}
  layers: {{type: int, minval: 1, maxval: 8}}
  dropout: {{type: double, minval: 0.0, maxval: 0.5}}
resources: {{slots_per_trial: 1}}
"""

HELLO = """
import sys
from flask import Flask, jsonify
from waitress import serve
app = Flask("hello")
@app.get("/hello")
def hello():
    return jsonify({"hello": "world"})
serve(app, host="127.0.0.1", port=int(sys.argv[1]), threads=int(sys.argv[2]), _quiet=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load(call: Callable[[requests.Session], None], make: Callable[[], requests.Session],
         threads: int, seconds: float) -> dict[str, float]:  # fmt: skip
    """``threads`` threads calling ``call`` for ``seconds``: req/s, p50, p99 (ms)."""
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors = [0]
    stop = threading.Event()

    def worker(i: int) -> None:
        s = make()
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                call(s)
            except requests.RequestException:
                errors[0] += 1
                continue
            latencies[i].append(time.perf_counter() - t0)

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    start = time.perf_counter()
    for t in pool:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in pool:
        t.join(60)
    elapsed = time.perf_counter() - start
    lat = sorted(x for per in latencies for x in per)
    if not lat:
        return {"rps": 0.0, "p50": float("nan"), "p99": float("nan"), "errors": errors[0]}
    return {
        "rps": len(lat) / elapsed,
        "p50": 1000 * lat[len(lat) // 2],
        "p99": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))],
        "errors": errors[0],
    }


def seed(m: Any, db_url: str, experiments: int, steps: int) -> tuple[int, int]:
    """Creates the experiments (the first with 100 trials) and one trial's series; returns
    (the 100-trial experiment, the trial with the series)."""
    token = m.login()
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {token}"
    ids = []
    for i in range(experiments):
        r = s.post(
            f"{m.url}/api/v1/experiments",
            json={"config": CONFIG.format(i=i, trials=100 if i == 0 else 1), "activate": False},
            timeout=60,
        )
        r.raise_for_status()
        ids.append(int(r.json()["experiment"]["id"]))
    big = ids[0]
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(
            "INSERT INTO trials (experiment_id, request_id, task_id, hparams, seed, state)"
            " SELECT %s, 'r' || g, 'bench-' || g, %s::jsonb, g, 'PAUSED'"
            " FROM generate_series(1, 100) g",
            (big, json.dumps({"lr": 0.01, "layers": 3, "dropout": 0.1})),
        )
        trial = c.execute("SELECT min(id) FROM trials WHERE experiment_id = %s", (big,)).fetchone()[
            0
        ]  # type: ignore[index]
        # The series straight into the table, as the ingest path writes it (this bench reads).
        c.execute(
            "INSERT INTO metrics (trial_id, metric_group, total_batches, metrics)"
            " SELECT %s, 'training', g, jsonb_build_object('avgMetrics', %s::jsonb)"
            " FROM generate_series(1, %s) g",
            (trial, json.dumps({f"m{k}": 0.5 for k in range(10)}), steps),
        )
    return big, trial


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--experiments", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=YAML")
    args = ap.parse_args()
    extra = {}
    for item in args.set:
        key, _, value = item.partition("=")
        extra[key] = yaml.safe_load(value)
    import pgserver

    results: dict[str, list[dict[str, float]]] = {}
    series: dict[str, list[float]] = {"api": [], "select": []}
    with tempfile.TemporaryDirectory() as tmp:
        server = pgserver.get_server(Path(tmp) / "pg", cleanup_mode="stop")
        base = server.get_uri()
        with psycopg.connect(base, autocommit=True) as c:
            c.execute("CREATE DATABASE bench")
        head, sep, q = base.partition("?")
        db_url = head.rsplit("/", 1)[0] + "/bench" + sep + q
        m = start_master(Path(tmp), db_url, extra=extra)
        port = free_port()
        hello = subprocess.Popen(
            [sys.executable, "-c", HELLO, str(port), str(extra.get("api_threads", 128))]
        )
        try:
            t0 = time.perf_counter()
            big, trial = seed(m, db_url, args.experiments, args.steps)
            print(f"seeded {args.experiments} experiments in {time.perf_counter() - t0:.0f} s")
            token = m.login()

            def session() -> requests.Session:
                s = requests.Session()
                s.headers["Authorization"] = f"Bearer {token}"
                return s

            def get(path: str) -> Callable[[requests.Session], None]:
                def call(s: requests.Session) -> None:
                    s.get(m.url + path, timeout=60).raise_for_status()

                return call

            reads: dict[str, tuple[Callable[[requests.Session], None], Any]] = {
                "hello (reference)": (
                    lambda s: s.get(
                        f"http://127.0.0.1:{port}/hello", timeout=60
                    ).raise_for_status(),
                    requests.Session,
                ),
                "experiment list, limit 20": (get("/api/v1/experiments?limit=20"), session),
                "experiment list, limit 100": (get("/api/v1/experiments?limit=100"), session),
                "experiment get": (get(f"/api/v1/experiments/{big}"), session),
                "trial list (100 trials)": (get(f"/api/v1/experiments/{big}/trials"), session),
                "job queue": (get("/api/v1/job-queues-v2"), session),
            }
            for run in range(args.runs):
                for name, (call, make) in reads.items():
                    results.setdefault(name, []).append(
                        load(call, make, args.threads, args.seconds)
                    )
                s = session()
                t1 = time.perf_counter()
                r = s.get(f"{m.url}/api/v1/trials/{trial}/metrics?group=training", timeout=120)
                r.raise_for_status()
                series["api"].append(time.perf_counter() - t1)
                with psycopg.connect(db_url) as c:
                    t1 = time.perf_counter()
                    c.execute(
                        "SELECT * FROM metrics WHERE trial_id = %s AND metric_group = 'training'"
                        " ORDER BY total_batches",
                        (trial,),
                    ).fetchall()
                    series["select"].append(time.perf_counter() - t1)
                print(f"run {run + 1} done", file=sys.stderr)
        finally:
            hello.kill()
            m.kill()
            server.cleanup()
    print(
        f"master config: {extra or 'defaults'}; {args.threads} threads, {args.seconds} s per read,"
    )
    print(f"medians of {args.runs} runs")
    print(f"{'read':32} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for name, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("rps", "p50", "p99")}
        print(f"{name:32} {med['rps']:8.0f} {med['p50']:8.1f} {med['p99']:8.1f}")
    api, sel = statistics.median(series["api"]), statistics.median(series["select"])
    print(
        f"series of {args.steps} steps x 10 metrics: API {1000 * api:.0f} ms,"
        f" indexed SELECT {1000 * sel:.0f} ms ({api / sel:.1f}x)"
    )


if __name__ == "__main__":
    main()
