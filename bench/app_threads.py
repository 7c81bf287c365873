"""What a metric report costs the master's app as more threads are in it at once.

A master app in this process (``tests.integration.inproc``) on a fresh ``pgserver`` database,
one experiment's trials RUNNING, each with an allocation whose token it reports with. For each
thread count of ``--threads``, that many threads call the WSGI app (the pre-dispatch layer and
Flask, no HTTP server) with Determined's one-step report (``POST /api/v1/trials/<id>/metrics``,
10 metrics), each thread on its own trial, back to back, ``--calls`` in all; rounds alternate
the counts. Printed per count: the process's CPU a call (this process is the master: the app's
threads, no HTTP server), the median of the calling threads' own CPU a call, and calls a second
(PostgreSQL's time is in the wall, not the CPU). A front at 1,000 x 2,000 (``bench/scale.py
--waits``) has 10-20 requests in its app at once.

    .venv/bin/python bench/app_threads.py [--threads 1,4,16,64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIG = """
name: app-threads
entrypoint: python3 train.py
searcher: {name: random, metric: loss, max_trials: 1, max_length: 10}
hyperparameters: {lr: 0.1}
"""


def prepare(m: Any, db_url: str, trials: int) -> list[tuple[int, str]]:
    """``trials`` RUNNING trials of one experiment, each with a live allocation: (id, token)."""
    from det.master.services import users

    eid = m.post("/api/v1/experiments", {"config": CONFIG, "activate": False})["experiment"]["id"]
    out = []
    with psycopg.connect(db_url, autocommit=True) as c:
        for i in range(trials):
            task = f"bench-{eid}-{i}"
            row = c.execute(
                "INSERT INTO trials (experiment_id, request_id, task_id, hparams, seed, state)"
                " VALUES (%s, %s, %s, '{\"lr\": 0.1}', %s, 'RUNNING') RETURNING id",
                (eid, f"r{i}", task, i),
            ).fetchone()
            assert row is not None
            token = f"token-{task}"
            c.execute(
                "INSERT INTO allocations (id, kind, task_id, trial_id, job_id, resource_pool,"
                " slots_needed, state, token_hash) VALUES (%s, 'TRIAL', %s, %s, 'j', 'default',"
                " 1, 'RUNNING', %s)",
                (f"{task}.1", task, row[0], users.token_digest(token)),
            )
            out.append((int(row[0]), token))
    # The fronts hear other masters' revocations, so they keep a token's lookup.
    m.state.auth_epoch.set_listening(True)
    return out


class Reporter:
    """One-step reports of one trial through a WSGI app, each at the next step."""

    def __init__(self, app: Any, trial: tuple[int, str]) -> None:
        self.app = app
        self.trial_id, self.token = trial
        self.step = 0

    def call(self) -> None:
        self.step += 100
        body = json.dumps(
            {
                "group": "training",
                "metrics": {
                    "trialId": self.trial_id,
                    "trialRunId": 1,
                    "stepsCompleted": self.step,
                    "metrics": {"avgMetrics": {f"m{k}": k + 1.0 / self.step for k in range(10)}},
                },
            }
        ).encode()
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": f"/api/v1/trials/{self.trial_id}/metrics",
            "QUERY_STRING": "",
            "SERVER_NAME": "localhost",
            "SERVER_PORT": "8080",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": "localhost:8080",
            "REMOTE_ADDR": "127.0.0.1",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_GRPC_METADATA_X_ALLOCATION_TOKEN": f"Bearer {self.token}",
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": io.StringIO(),
            "wsgi.url_scheme": "http",
            "wsgi.version": (1, 0),
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        status: list[str] = []
        b"".join(self.app(environ, lambda s, h, e=None: status.append(s)))
        if not status[0].startswith("200"):
            raise RuntimeError(f"report answered {status[0]}")


def run(reporters: list[Reporter], calls: int) -> tuple[float, float, float, float, float]:
    """(process CPU ms a call, median thread CPU ms a call, calls a second, and a call's
    context switches: waiting, preempted)."""
    per = max(1, calls // len(reporters))
    spent: list[float] = []
    lock = threading.Lock()

    switches = [0, 0]

    def worker(r: Reporter) -> None:
        mine = []
        ru = resource.getrusage(resource.RUSAGE_THREAD)
        for _ in range(per):
            t0 = time.thread_time()
            r.call()
            mine.append(time.thread_time() - t0)
        ru1 = resource.getrusage(resource.RUSAGE_THREAD)
        with lock:
            spent.extend(mine)
            switches[0] += ru1.ru_nvcsw - ru.ru_nvcsw
            switches[1] += ru1.ru_nivcsw - ru.ru_nivcsw

    threads = [threading.Thread(target=worker, args=(r,)) for r in reporters]
    wall, cpu = time.perf_counter(), time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    n = per * len(reporters)
    return (
        cpu / n * 1e3,
        statistics.median(spent) * 1e3,
        n / wall,
        switches[0] / n,
        switches[1] / n,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", default="1,4,16,64")
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    thread_counts = [int(x) for x in args.threads.split(",")]

    from bench._pg import bench_database
    from tests.integration.inproc import in_process_master

    with tempfile.TemporaryDirectory(prefix="det-bench-app-threads-") as tmp:
        server, db_url = bench_database(Path(tmp))
        try:
            with in_process_master(Path(tmp), db_url) as m:
                trials = prepare(m, db_url, max(thread_counts))
                reporters = [Reporter(m.app, t) for t in trials]
                for r in reporters[:8]:  # warm: the token cache, prepared statements
                    for _ in range(20):
                        r.call()
                results: dict[int, list[tuple[float, float, float, float, float]]] = {}
                for _ in range(args.rounds):
                    for n in thread_counts:
                        results.setdefault(n, []).append(run(reporters[:n], args.calls))
        finally:
            server.cleanup()
    print(
        f"{'threads':>7} {'CPU ms/call':>11} {'thread CPU':>10} {'calls/s':>8}"
        f" {'waiting':>7} {'preempted':>9}"
    )
    for n, rs in results.items():
        cpu, own, rate, vol, invol = (statistics.median(r[i] for r in rs) for i in range(5))
        print(f"{n:7d} {cpu:11.3f} {own:10.3f} {rate:8.0f} {vol:7.1f} {invol:9.1f}")
    print(f"medians of {args.rounds} rounds")


if __name__ == "__main__":
    main()
