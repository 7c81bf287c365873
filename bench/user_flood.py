"""A user's flood against the master: ``/info`` latency and the master's memory meanwhile.

Starts a master (private PostgreSQL from ``pgserver``) with a simulated agent running one task,
creates 200 experiments (so each list of 100 is a real page), then for ``--seconds`` one user
runs 200 threads of preemption long-polls (``timeout_seconds=30``) on the task's allocation and
200 threads listing ``/api/v1/experiments?limit=100`` in a loop (backing off as a 429's
``Retry-After`` says), while a probe sends ``GET /info`` every 50 ms on its own connection.
Prints the probe's latency percentiles, the flood's answers by status, and the master's peak
RSS (all its processes), per run and as medians.

    .venv/bin/python bench/user_flood.py [--runs 3] [--seconds 20] [--set KEY=YAML ...]

``--set`` adds a key to the master's config (``--set user_api_processes=0`` for the master
without its user processes). ``--py-spy DIR`` records a py-spy profile of each master process
during the first run (py-spy must be on PATH) and writes them to DIR.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._pg import bench_database, master_settings
from tests.fakes.sim_agent import SimAgent, wait
from tests.integration.conftest import start_master

CONFIG = """
name: flood-{i}
entrypoint: x
searcher: {{name: single, metric: loss, max_length: 10}}
"""


def memory_of_tree(pid: int) -> tuple[int, int]:
    """(RSS, PSS) summed over the master's processes: RSS counts the pages forked processes
    share once per process, PSS divides them among the sharers."""
    rss = pss = 0
    proc = psutil.Process(pid)
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            info = p.memory_full_info()
            rss += info.rss
            pss += getattr(info, "pss", info.rss)
    return rss, pss


def _py_spy() -> str:
    """py-spy on PATH, else the one installed beside this interpreter (the venv's)."""
    beside = Path(sys.executable).parent / "py-spy"
    return shutil.which("py-spy") or (str(beside) if beside.exists() else "py-spy")


def profile(pid: int, seconds: float, out_dir: Path) -> list[subprocess.Popen[bytes]]:
    out_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    for p in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        procs.append(
            subprocess.Popen(
                [
                    _py_spy(),
                    "record",
                    "--pid",
                    str(p.pid),
                    "--duration",
                    str(int(seconds)),
                    "--format",
                    "raw",
                    "--threads",
                    "--gil",  # only the thread holding the interpreter: where its time goes
                    "--nonblocking",  # never pause the master (it would distort the probe)
                    "--output",
                    str(out_dir / f"master-{p.pid}.txt"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    return procs


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


def one_run(
    url: str, token: str, alloc: str, master_pid: int, seconds: float, spy: Path | None
) -> dict[str, Any]:
    stop = threading.Event()
    latencies: list[float] = []
    peak = [0, 0]

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
            rss, pss = memory_of_tree(master_pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)
            stop.wait(0.2)

    out: multiprocessing.Queue[Any] = multiprocessing.Queue()
    flooder = multiprocessing.Process(target=flood_process, args=(url, token, alloc, seconds, out))
    flooder.start()
    time.sleep(2)  # the flood is under way before the probe starts
    spies = profile(master_pid, seconds - 4, spy) if spy is not None else []
    threads = [threading.Thread(target=probe), threading.Thread(target=memory)]
    for t in threads:
        t.start()
    counts = out.get(timeout=seconds + 120)
    flooder.join(30)
    stop.set()
    for t in threads:
        t.join(60)
    for p in spies:
        p.wait(60)
    lat = sorted(latencies)
    return {
        "p50_ms": 1000 * lat[len(lat) // 2],
        "p99_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))],
        "max_ms": 1000 * lat[-1],
        "probes": len(lat),
        "rss_mb": peak[0] / 2**20,
        "pss_mb": peak[1] / 2**20,
        "counts": dict(sorted(counts.items())),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=YAML")
    ap.add_argument("--py-spy", type=Path, default=None, metavar="DIR")
    args = ap.parse_args()
    extra = master_settings(args.set)

    with tempfile.TemporaryDirectory() as tmp:
        server, db_url = bench_database(Path(tmp))
        m = start_master(Path(tmp), db_url, extra=extra)
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
            rss_idle, pss_idle = (b / 2**20 for b in memory_of_tree(m.proc.pid))
            runs = [
                one_run(
                    m.url, token, alloc, m.proc.pid, args.seconds, args.py_spy if i == 0 else None
                )
                for i in range(args.runs)
            ]
        finally:
            release.set()
            agent.stop()
            m.kill()
            server.cleanup()
    print(f"master config: {extra or 'defaults'}")
    print(f"master before the flood: RSS {rss_idle:.0f} MB, PSS {pss_idle:.0f} MB")
    for i, r in enumerate(runs):
        print(
            f"run {i + 1}: /info p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, max"
            f" {r['max_ms']:.0f} ms ({r['probes']} probes); peak RSS {r['rss_mb']:.0f} MB, PSS"
            f" {r['pss_mb']:.0f} MB;"
            f" flood answers {r['counts']}"
        )
    med = {
        k: statistics.median(r[k] for r in runs) for k in ("p50_ms", "p99_ms", "rss_mb", "pss_mb")
    }
    verdict = "met" if med["p99_ms"] <= 50 else "not met"
    print(
        f"median: /info p50 {med['p50_ms']:.1f} ms, p99 {med['p99_ms']:.1f} ms"
        f" (goals: p99 < 100 ms, issue 14; p99 <= 50 ms, issue 29: {verdict}); peak RSS"
        f" {med['rss_mb']:.0f} MB, PSS {med['pss_mb']:.0f} MB"
    )


if __name__ == "__main__":
    main()
