"""A user's flood against the master: ``/info`` latency and the master's memory meanwhile.

Starts a master (private PostgreSQL from ``pgserver``) with a simulated agent running one task,
creates 200 experiments (so each list of 100 is a real page), then for ``--seconds`` one user
runs 200 threads of preemption long-polls (``timeout_seconds=30``) on the task's allocation and
200 threads listing ``/api/v1/experiments?limit=100`` in a loop (backing off as a 429's
``Retry-After`` says), while a probe sends ``GET /info`` every 50 ms on its own connection.
Prints the probe's latency percentiles, the flood's answers by status, and the master's peak
RSS (all its processes), per run and as medians.

    .venv/bin/python bench/user_flood.py [--runs 3] [--seconds 20]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakes.sim_agent import SimAgent, wait
from tests.integration.conftest import start_master

CONFIG = """
name: flood-{i}
entrypoint: x
searcher: {{name: single, metric: loss, max_length: 10}}
"""


def rss_of_tree(pid: int) -> int:
    proc = psutil.Process(pid)
    total = proc.memory_info().rss
    for child in proc.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            total += child.memory_info().rss
    return total


def flood_process(
    url: str, token: str, alloc: str, seconds: float, out: multiprocessing.Queue[Any]
) -> None:
    """The user's 400 threads, in a process of their own (the probe must not queue behind
    them for the client's GIL)."""
    stop = threading.Event()
    counts: dict[int, int] = {}
    lock = threading.Lock()

    def flood(path: str, params: dict[str, Any]) -> None:
        s = requests.Session()
        s.headers["Authorization"] = f"Bearer {token}"
        while not stop.is_set():
            try:
                r = s.get(url + path, params=params, timeout=60)
                status = r.status_code
            except requests.RequestException:
                status = 0
            with lock:
                counts[status] = counts.get(status, 0) + 1
            if status == 429:
                stop.wait(1.0)

    poll = (f"/api/v1/allocations/{alloc}/signals/preemption", {"timeout_seconds": 30})
    lists = ("/api/v1/experiments", {"limit": 100})
    threads = [threading.Thread(target=flood, args=poll) for _ in range(200)]
    threads += [threading.Thread(target=flood, args=lists) for _ in range(200)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(60)
    out.put(dict(sorted(counts.items())))


def one_run(url: str, token: str, alloc: str, master_pid: int, seconds: float) -> dict[str, Any]:
    stop = threading.Event()
    latencies: list[float] = []
    peak = [0]

    def probe() -> None:
        s = requests.Session()
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                s.get(url + "/info", timeout=30)
                latencies.append(time.perf_counter() - t0)
            except requests.RequestException:
                latencies.append(30.0)
            stop.wait(0.05)

    def memory() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_of_tree(master_pid))
            stop.wait(0.2)

    out: multiprocessing.Queue[Any] = multiprocessing.Queue()
    flooder = multiprocessing.Process(target=flood_process, args=(url, token, alloc, seconds, out))
    flooder.start()
    time.sleep(2)  # the flood is under way before the probe starts
    threads = [threading.Thread(target=probe), threading.Thread(target=memory)]
    for t in threads:
        t.start()
    counts = out.get(timeout=seconds + 120)
    flooder.join(30)
    stop.set()
    for t in threads:
        t.join(60)
    lat = sorted(latencies)
    return {
        "p50_ms": 1000 * lat[len(lat) // 2],
        "p99_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))],
        "max_ms": 1000 * lat[-1],
        "probes": len(lat),
        "rss_mb": peak[0] / 2**20,
        "counts": dict(sorted(counts.items())),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20)
    args = ap.parse_args()
    import pgserver

    with tempfile.TemporaryDirectory() as tmp:
        server = pgserver.get_server(Path(tmp) / "pg", cleanup_mode="stop")
        base = server.get_uri()
        with psycopg.connect(base, autocommit=True) as c:
            c.execute("CREATE DATABASE bench")
        head, sep, q = base.partition("?")
        db_url = head.rsplit("/", 1)[0] + "/bench" + sep + q
        m = start_master(Path(tmp), db_url)
        specs: list[dict[str, Any]] = []
        release = threading.Event()

        def hold(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
            specs.append(spec)
            release.wait(3600)
            return 0

        agent = SimAgent(m.url, m.agent_token, "sim-0", slots=1, train=hold).start()
        try:
            token = m.login()
            s = requests.Session()
            s.headers["Authorization"] = f"Bearer {token}"
            for i in range(200):
                s.post(
                    f"{m.url}/api/v1/experiments",
                    json={"config": CONFIG.format(i=i), "activate": i == 0},
                    timeout=30,
                ).raise_for_status()
            wait(lambda: len(specs) == 1, 60, "the task running")
            alloc = specs[0]["env"]["DET_ALLOCATION_ID"]
            rss_idle = rss_of_tree(m.proc.pid) / 2**20
            runs = [
                one_run(m.url, token, alloc, m.proc.pid, args.seconds) for _ in range(args.runs)
            ]
        finally:
            release.set()
            agent.stop()
            m.kill()
            server.cleanup()
    print(f"master RSS before the flood: {rss_idle:.0f} MB")
    for i, r in enumerate(runs):
        print(
            f"run {i + 1}: /info p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, max"
            f" {r['max_ms']:.0f} ms ({r['probes']} probes); peak RSS {r['rss_mb']:.0f} MB;"
            f" flood answers {r['counts']}"
        )
    med = {k: statistics.median(r[k] for r in runs) for k in ("p50_ms", "p99_ms", "rss_mb")}
    print(
        f"median: /info p50 {med['p50_ms']:.1f} ms, p99 {med['p99_ms']:.1f} ms"
        f" (goal p99 < 100 ms); peak RSS {med['rss_mb']:.0f} MB"
    )


if __name__ == "__main__":
    main()
