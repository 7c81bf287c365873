"""Read throughput of the master's API beside a bare Flask + waitress app in the same run.

Starts a master (private PostgreSQL from ``pgserver``, no agents) with ``--experiments``
paused experiments (default 1,000), one of them with 100 trials of 1,000 validations and 10
checkpoints each, ten of those with a ``--steps``-step series of 10 training metrics; then, for
each read, ``--threads`` client threads (keep-alive sessions, logged in) call it for
``--seconds`` and the bench prints requests per second, p50 and p99. The reference is a "hello"
Flask app served by waitress with the master's thread count, measured the same way in the same
run, so the figures can be compared across machines. The metric series read is shown beside the
same rows read by an indexed SELECT through psycopg, and the sampled series (CompareTrials) is
also read by one client alone (medians of ``--runs``). The job queue read goes over the
paused experiments' jobs but lists none of them (a paused experiment asks for no slots and is
left out, as in Determined's queue).

Each client thread reads as a user of its own (``--users``, default one per thread): a single
user's 16 concurrent requests would be over the master's per-user admission limit and answered
429, which is the limit working, not a read. Answers other than 200/304 are counted and printed.
The clients are lean (``http.client`` keep-alive connections; ``--client requests`` for
``requests`` sessions) because they share the cores with the master and PostgreSQL.

    .venv/bin/python bench/api_reads.py [--runs 3] [--seconds 5] [--threads 16] [--set KEY=YAML]
        [--only NAME]... [--profile DIR]

``--set`` adds a key to the master's config (``--set user_api_processes=2``). ``--profile DIR``
records a py-spy profile (``--gil``) of each master process during the first run's list of 20
and series reads. The CPU each read costs (master processes, PostgreSQL, the clients) is
printed per request beside the figures.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import psycopg
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._pg import bench_database, master_settings
from bench.user_flood import profile
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

SERIES_TRIALS = 10  # trials with a series; the sampled read asks for all of them
VALIDATIONS = 1000  # validations of each trial of the 100-trial experiment
CHECKPOINT_EVERY = 100  # a checkpoint every this many of them
SAMPLED_POINTS = 500
READER_PASSWORD = "Reader-pw-1"
_COLD = [0]  # uncached sampled reads so far (each asks for one point fewer)

Call = Callable[[Any], int]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Lean:
    """A keep-alive HTTP client with a bearer token, as light as the standard library allows."""

    def __init__(self, url: str, token: str | None = None) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.conn: http.client.HTTPConnection | None = None

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, Any]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            self.conn.request("GET", path, headers={**self.headers, **(headers or {})})
            resp = self.conn.getresponse()
            return resp.status, resp.read(), resp.headers
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise


class Requests:
    """The same interface over a ``requests`` session."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url
        self.s = requests.Session()
        if token:
            self.s.headers["Authorization"] = f"Bearer {token}"

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, Any]:
        r = self.s.get(self.url + path, headers=headers, timeout=60)
        return r.status_code, r.content, r.headers


def get(path: str) -> Call:
    def call(c: Any) -> int:
        return int(c.get(path)[0])

    return call


def conditional(path: str) -> Call:
    """Reads ``path`` once, then asks again with its ETag (a 304 when unchanged)."""

    def call(c: Any) -> int:
        tag = getattr(c, "etags", {}).get(path)
        status, _, headers = c.get(path, {"If-None-Match": tag} if tag else None)
        if status == 200 and headers.get("ETag"):
            c.etags = {**getattr(c, "etags", {}), path: headers["ETag"]}
        return int(status)

    return call


class CPU:
    """CPU seconds used by the processes of a tree (re-listed on each read: forked workers)."""

    def __init__(self, *pids: int) -> None:
        self.pids = pids

    def read(self) -> float:
        total = 0.0
        for pid in self.pids:
            try:
                root = psutil.Process(pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
            for p in procs:
                try:
                    t = p.cpu_times()
                    total += t.user + t.system
                except psutil.NoSuchProcess:
                    pass
        return total


def self_cpu() -> float:
    t = psutil.Process().cpu_times()
    return t.user + t.system


def load(call: Call, clients: list[Any], seconds: float, cpus: dict[str, CPU]) -> dict[str, Any]:
    """One thread per client calling ``call`` for ``seconds``: req/s, p50, p99 (ms), the
    statuses other than 200/304, and CPU ms per answered request of each process group."""
    latencies: list[list[float]] = [[] for _ in clients]
    other: dict[int, int] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def worker(i: int) -> None:
        c = clients[i]
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                status = call(c)
            except (OSError, http.client.HTTPException, requests.RequestException):
                status = 0
            if status in (200, 304):
                latencies[i].append(time.perf_counter() - t0)
            else:
                with lock:
                    other[status] = other.get(status, 0) + 1
                stop.wait(0.05)

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(len(clients))]
    before = {k: c.read() for k, c in cpus.items()}
    before["clients"] = self_cpu()
    start = time.perf_counter()
    for t in pool:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in pool:
        t.join(60)
    elapsed = time.perf_counter() - start
    used = {k: c.read() - before[k] for k, c in cpus.items()}
    used["clients"] = self_cpu() - before["clients"]
    lat = sorted(x for per in latencies for x in per)
    n = len(lat)
    out: dict[str, Any] = {"other": other, "n": n}
    if not lat:
        return {**out, "rps": 0.0, "p50": float("nan"), "p99": float("nan"), "cpu": {}}
    return {
        **out,
        "rps": n / elapsed,
        "p50": 1000 * lat[n // 2],
        "p99": 1000 * lat[min(n - 1, int(n * 0.99))],
        "cpu": {k: 1000 * v / n for k, v in used.items()},
    }


def seed(m: Any, db_url: str, experiments: int, steps: int) -> tuple[int, list[int]]:
    """Creates the experiments (the first with 100 trials) and ``SERIES_TRIALS`` trials' series;
    returns (the 100-trial experiment, the trials with a series)."""
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
        # Each of its trials: VALIDATIONS validations of the searcher metric (as the WebUI's
        # experiment page of 100 trials x 1,000 points reads them) and a checkpoint every
        # CHECKPOINT_EVERY of them.
        c.execute(
            "INSERT INTO metrics (trial_id, metric_group, total_batches, metrics)"
            " SELECT t.id, 'validation', s, jsonb_build_object('avg_metrics',"
            " jsonb_build_object('validation_loss', 1.0 / (1 + s / 100.0) + (t.id %% 17) / 100.0))"
            " FROM trials t, generate_series(1, %s) s WHERE t.experiment_id = %s",
            (VALIDATIONS, big),
        )
        c.execute(
            "INSERT INTO checkpoints (uuid, trial_id, task_id, steps_completed, size, resources)"
            " SELECT gen_random_uuid(), t.id, t.task_id, s, 1000, '{\"model.pt\": 1000}'"
            " FROM trials t, generate_series(%s::int, %s::int, %s::int) s WHERE t.experiment_id = %s",
            (CHECKPOINT_EVERY, VALIDATIONS, CHECKPOINT_EVERY, big),
        )
        # The ingest keeps each trial's best validation pointer; rows written straight into the
        # table get theirs from the function the migration added (absent before it).
        if c.execute("SELECT to_regproc('det_best_validation')").fetchone()[0]:
            c.execute(
                "UPDATE trials SET best_validation_id = det_best_validation(id)"
                " WHERE experiment_id = %s",
                (big,),
            )
        c.execute("ANALYZE")
        trials = [
            r[0]
            for r in c.execute(
                "SELECT id FROM trials WHERE experiment_id = %s ORDER BY id LIMIT %s",
                (big, SERIES_TRIALS),
            )
        ]
        # The series straight into the table, in the form the ingest path writes (this bench
        # reads): {"avg_metrics": {...}}, values that change from step to step.
        metrics = ", ".join(f"'m{k}', (g * {k + 1}) %% 997 / 997.0 + %s" for k in range(10))
        for t in trials:
            c.execute(
                "INSERT INTO metrics (trial_id, metric_group, total_batches, metrics)"
                f" SELECT %s, 'training', g, jsonb_build_object('avg_metrics',"
                f" jsonb_build_object({metrics})) FROM generate_series(1, %s) g",
                (t, *([t / 1000] * 10), steps),
            )
    return big, trials


# Issue 29's goals beside the figures they are for.
GOALS = {"experiment list, limit 20": "issue 43's goal: >= 1.0x hello, p99 <= 20 ms"}

# The list of 20 while its first page changes: an experiment on it is renamed (PATCH, by the
# admin) every RENAME_SECONDS during the read, so the pages kept by the API processes
# (det.master.listcache) go stale that often and are built again.
CHANGING = "experiment list 20, renames 10/s"
RENAME_SECONDS = 0.1


def renames(m: Any, experiment_id: int, stop: threading.Event) -> None:
    s = m.session()
    i = 0
    while not stop.wait(RENAME_SECONDS):
        i += 1
        r = s.patch(
            f"{m.url}/api/v1/experiments/{experiment_id}", json={"name": f"renamed-{i}"}, timeout=60
        )
        r.raise_for_status()


def readers(m: Any, n: int) -> list[str]:
    """``n`` users' session tokens (non-admin users of their own)."""
    s = m.session()
    tokens = []
    for i in range(n):
        name = f"reader{i}"
        r = s.post(
            f"{m.url}/api/v1/users",
            json={"user": {"username": name, "admin": False, "active": True},
                  "password": READER_PASSWORD},
            timeout=30,
        )  # fmt: skip
        r.raise_for_status()
        tokens.append(m.login(name, READER_PASSWORD))
    return tokens


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--users", type=int, default=0, help="0: one per thread")
    ap.add_argument("--experiments", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--client", choices=("lean", "requests"), default="lean")
    ap.add_argument("--only", action="append", default=[], help="a substring of a read's name")
    ap.add_argument("--profile", type=Path, default=None, metavar="DIR")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=YAML")
    args = ap.parse_args()
    extra = master_settings(args.set)
    client_cls: Any = Lean if args.client == "lean" else Requests

    results: dict[str, list[dict[str, Any]]] = {}
    series: dict[str, list[float]] = {"api": [], "select": [], "sampled": [], "sampled_cold": []}
    with tempfile.TemporaryDirectory() as tmp:
        server, db_url = bench_database(Path(tmp))
        m = start_master(Path(tmp), db_url, extra=extra)
        port = free_port()
        hello = subprocess.Popen(
            [sys.executable, "-c", HELLO, str(port), str(extra.get("api_threads", 128))]
        )
        try:
            t0 = time.perf_counter()
            big, trials = seed(m, db_url, args.experiments, args.steps)
            tokens = readers(m, args.users or args.threads)
            print(f"seeded {args.experiments} experiments in {time.perf_counter() - t0:.0f} s")
            cpus = {
                "master": CPU(m.proc.pid),
                "postgres": CPU(int(server.get_pid() or 0)),
                "hello": CPU(hello.pid),
            }
            hello_url = f"http://127.0.0.1:{port}"
            ids = "&".join(f"trialIds={t}" for t in trials)
            sampled = (
                f"/api/v1/trials/time-series?{ids}&metricNames=m3&metricType=METRIC_TYPE_TRAINING"
                f"&maxDatapoints={SAMPLED_POINTS}"
            )
            reads: dict[str, tuple[Call, str]] = {
                "hello (reference)": (get("/hello"), hello_url),
                "experiment list, limit 20": (get("/api/v1/experiments?limit=20"), m.url),
                "experiment list, limit 100": (get("/api/v1/experiments?limit=100"), m.url),
                "experiment list 20, If-None-Match": (
                    conditional("/api/v1/experiments?limit=20"),
                    m.url,
                ),
                CHANGING: (get("/api/v1/experiments?limit=20"), m.url),
                "experiment get": (get(f"/api/v1/experiments/{big}"), m.url),
                "trial list (100 trials)": (get(f"/api/v1/experiments/{big}/trials"), m.url),
                "job queue": (get("/api/v1/job-queues-v2"), m.url),
                f"sampled series ({SERIES_TRIALS}x1x{SAMPLED_POINTS})": (get(sampled), m.url),
            }
            only = args.only
            if only:
                reads = {k: v for k, v in reads.items() if k.startswith("hello")
                         or any(o in k for o in only)}  # fmt: skip
            probe = client_cls(m.url, tokens[0])
            for name, (call, url) in list(reads.items()):
                status = call(probe) if url == m.url else 200
                if status != 200:
                    print(f"{name}: {status} (not served by this master; left out)")
                    del reads[name]
            for run in range(args.runs):
                for name, (call, url) in reads.items():
                    clients = [
                        client_cls(url, tokens[i % len(tokens)] if url == m.url else None)
                        for i in range(args.threads)
                    ]
                    spies: list[subprocess.Popen[bytes]] = []
                    if args.profile and run == 0 and name == "experiment list, limit 20":
                        spies = spy(m.proc.pid, args.seconds, args.profile / "list20")
                    stop = threading.Event()
                    # The second experiment: on the first page (ids ascend in creation order).
                    writer = threading.Thread(target=renames, args=(m, big + 1, stop))
                    if name == CHANGING:
                        writer.start()
                    results.setdefault(name, []).append(load(call, clients, args.seconds, cpus))
                    stop.set()
                    if writer.is_alive():
                        writer.join(60)
                    for p in spies:
                        p.wait(60)
                if not only or "series" in only:
                    series_run(m, tokens[0], db_url, trials[0], series, client_cls,
                               args.profile if run == 0 else None, sampled)  # fmt: skip
                print(f"run {run + 1} done", file=sys.stderr)
        finally:
            hello.kill()
            m.kill()
            server.cleanup()
    report(args, extra, results, series)


def spy(pid: int, seconds: float, out: Path) -> list[subprocess.Popen[bytes]]:
    """py-spy on every master process (the venv's py-spy on the PATH)."""
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]
    return profile(pid, max(1, seconds - 1), out)


def series_run(
    m: Any,
    token: str,
    db_url: str,
    trial: int,
    series: dict[str, list[float]],
    client_cls: Any,
    profile_dir: Path | None,
    sampled: str,
) -> None:
    """The series read (API and SELECT) and the sampled series, each the median of 5 reads,
    one client."""
    c = client_cls(m.url, token)
    c.get(sampled)  # warm
    times = []
    for _ in range(5):
        t1 = time.perf_counter()
        status, body, _ = c.get(sampled)
        assert status == 200, (status, body[:200])
        times.append(time.perf_counter() - t1)
    series["sampled"].append(statistics.median(times))
    # Uncached: each master process keeps a trial's sampled series while the trial is
    # unchanged, so a read of points not asked for before (another maxDatapoints) samples anew.
    times = []
    for _ in range(5):
        _COLD[0] += 1
        cold = sampled.replace(
            f"maxDatapoints={SAMPLED_POINTS}", f"maxDatapoints={SAMPLED_POINTS - _COLD[0]}"
        )
        t1 = time.perf_counter()
        status, body, _ = c.get(cold)
        assert status == 200, (status, body[:200])
        times.append(time.perf_counter() - t1)
    series["sampled_cold"].append(statistics.median(times))
    c.get(f"/api/v1/trials/{trial}/metrics?group=training")  # warm
    spies = spy(m.proc.pid, 4, profile_dir / "series") if profile_dir else []
    times = []
    end = time.perf_counter() + (4 if profile_dir else 0)
    while len(times) < 5 or time.perf_counter() < end:
        t1 = time.perf_counter()
        status, body, _ = c.get(f"/api/v1/trials/{trial}/metrics?group=training")
        assert status == 200, (status, body[:200])
        times.append(time.perf_counter() - t1)
    for p in spies:
        p.wait(60)
    series["api"].append(statistics.median(times))
    times = []
    with psycopg.connect(db_url) as conn:
        for _ in range(5):
            t1 = time.perf_counter()
            conn.execute(
                "SELECT * FROM metrics WHERE trial_id = %s AND metric_group = 'training'"
                " ORDER BY total_batches",
                (trial,),
            ).fetchall()
            times.append(time.perf_counter() - t1)
    series["select"].append(statistics.median(times))


def report(
    args: Any,
    extra: dict[str, Any],
    results: dict[str, list[dict[str, Any]]],
    series: dict[str, list[float]],
) -> None:
    print(
        f"master config: {extra or 'defaults'}; {args.threads} threads ({args.client} clients,"
        f" {args.users or args.threads} users), {args.seconds} s per read, medians of {args.runs}"
        " runs; CPU ms per answered request"
    )
    groups = ("master", "postgres", "hello", "clients")
    print(f"{'read':36} {'req/s':>7} {'x hello':>7} {'p50 ms':>7} {'p99 ms':>7}  "
          + " ".join(f"{g:>8}" for g in groups) + "  other answers")  # fmt: skip
    hello = results.get("hello (reference)")
    for name, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("rps", "p50", "p99")}
        cpu = {g: statistics.median(r["cpu"].get(g, 0.0) for r in rs) for g in groups}
        other: dict[int, int] = {}
        for r in rs:
            for k, v in r["other"].items():
                other[k] = other.get(k, 0) + v
        # Each run's ratio to the hello run of the same round (minutes apart, same load).
        ratios = sorted(
            r["rps"] / h["rps"] for r, h in zip(rs, hello or [], strict=False) if h["rps"]
        )
        ratio = f"{statistics.median(ratios):7.2f}" if ratios else f"{'':7}"
        print(
            f"{name:36} {med['rps']:7.0f} {ratio} {med['p50']:7.1f} {med['p99']:7.1f}  "
            + " ".join(f"{cpu[g]:8.2f}" for g in groups)
            + (f"  {dict(sorted(other.items()))}" if other else "")
        )
        if name in GOALS and ratios:
            print(f"{'':36} {GOALS[name]}; runs {ratios[0]:.2f}-{ratios[-1]:.2f} x hello")
    if series["api"]:
        api, sel = statistics.median(series["api"]), statistics.median(series["select"])
        pairs = sorted(a / b for a, b in zip(series["api"], series["select"], strict=True))
        print(
            f"series of {args.steps} steps x 10 metrics: API {1000 * api:.0f} ms,"
            f" indexed SELECT {1000 * sel:.0f} ms ({api / sel:.2f}x; runs {pairs[0]:.2f}-"
            f"{pairs[-1]:.2f}x)   (issue 29's goal: <= 1x the SELECT)"
        )
    if series["sampled"]:
        print(
            f"sampled series ({SERIES_TRIALS}x1x{SAMPLED_POINTS}), one client:"
            f" {1000 * statistics.median(series['sampled']):.0f} ms (uncached:"
            f" {1000 * statistics.median(series['sampled_cold']):.0f} ms)"
        )


if __name__ == "__main__":
    main()
