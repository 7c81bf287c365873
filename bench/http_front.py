"""Candidate HTTP fronts for the master's WSGI app, in one run (issue 43, build 1).

Each server serves, in one process of its own with ``--threads`` worker threads, the same two
apps: a Flask "hello" and the master's own app (``create_app`` over ``server.prepare``, as
``det-master`` builds it, on a private PostgreSQL with ``--experiments`` experiments), so the
experiment list of 20 is read through each server. The servers: waitress (today's), gunicorn's
``gthread`` worker (1 worker), and granian's WSGI interface (1 worker, ``--threads`` blocking
threads), the last two from ``--candidates DIR`` (``pip install --target DIR gunicorn
granian``; they are not det's dependencies). For each server and read, ``--clients`` client
threads (api_reads.py's lean keep-alive clients, each its own user on the list) call it for
``--seconds``; servers and reads alternate in rounds (``--runs``) so that a loaded machine
disturbs each alike. Prints req/s, p50, p99 and the server's CPU per request (medians of the
runs), and each read's ratio to waitress's hello of the same round.

This measures the servers under the master's app only: the master's own front (the routing of
users' connections to their processes, the priority of cluster traffic, TLS, long-polls, the
WebSocket proxy) is waitress-specific and is not part of it.

    .venv/bin/python bench/http_front.py --candidates DIR [--runs 3] [--seconds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._pg import bench_database
from bench.api_reads import CPU, Lean, free_port, get, load, readers
from tests.integration.conftest import ADMIN_PASSWORD, master_config, start_master

APPS = """
import os, sys
from flask import Flask, jsonify

hello = Flask("hello")


@hello.get("/hello")
def _hello():
    return jsonify({"hello": "world"})


def _master():
    import yaml
    from det.master import server
    from det.master.app import create_app
    from det.master.config import parse_config

    with open(os.environ["BENCH_MASTER_YAML"]) as f:
        config = parse_config(yaml.safe_load(f), dict(os.environ))
    return create_app(server.prepare(config))


def app(environ, start_response):
    target = hello if environ.get("PATH_INFO", "") == "/hello" else master
    return target(environ, start_response)


master = _master()
"""

SERVE_WAITRESS = """
import sys
from waitress import serve
from bench_front_apps import app
serve(app, host="127.0.0.1", port=int(sys.argv[1]), threads=int(sys.argv[2]), _quiet=True,
      connection_limit=1000)
"""


def commands(server: str, port: int, threads: int) -> list[str]:
    if server == "waitress":
        return [sys.executable, "-c", SERVE_WAITRESS, str(port), str(threads)]
    if server == "gunicorn gthread":
        return [
            sys.executable,
            "-m",
            "gunicorn",
            "-k",
            "gthread",
            "-w",
            "1",
            "--threads",
            str(threads),
            "-b",
            f"127.0.0.1:{port}",
            "--log-level",
            "warning",
            "bench_front_apps:app",
        ]
    if server == "granian wsgi":
        return [
            sys.executable,
            "-m",
            "granian",
            "--interface",
            "wsgi",
            "--workers",
            "1",
            "--blocking-threads",
            str(threads),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "bench_front_apps:app",
        ]
    raise ValueError(f"unknown server {server!r}")


def up(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            if requests.get(url + "/hello", timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--candidates", type=Path, required=True, help="pip --target dir")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--experiments", type=int, default=100)
    args = ap.parse_args()
    servers = ["waitress", "gunicorn gthread", "granian wsgi"]
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        pg, db_url = bench_database(tmp)
        m = start_master(tmp / "seed", db_url)  # migrates, makes the users and experiments
        procs: dict[str, subprocess.Popen[bytes]] = {}
        try:
            s = m.session()
            for i in range(args.experiments):
                s.post(
                    f"{m.url}/api/v1/experiments",
                    json={
                        "config": (
                            f"name: front-{i}\nentrypoint: x\nsearcher: {{name: single, metric: l,"
                            " max_length: 1}\nhyperparameters: {}\n"
                        ),
                        "activate": False,
                    },
                    timeout=60,
                ).raise_for_status()
            tokens = readers(m, args.clients)
            m.kill()
            (tmp / "bench_front_apps.py").write_text(APPS)
            cfg = master_config(tmp / "front", db_url, 1)
            cfg["security"] = {"initial_user_password": ADMIN_PASSWORD}
            (tmp / "master.yaml").write_text(yaml.safe_dump(cfg))
            env = {
                **os.environ,
                "BENCH_MASTER_YAML": str(tmp / "master.yaml"),
                "PYTHONPATH": os.pathsep.join(
                    [
                        str(tmp),
                        str(Path(__file__).resolve().parents[1]),
                        str(args.candidates.resolve()),
                    ]
                ),
            }
            urls = {}
            for server in servers:
                port = free_port()
                procs[server] = subprocess.Popen(
                    commands(server, port, args.threads), env=env, cwd=tmp
                )
                urls[server] = f"http://127.0.0.1:{port}"
                up(urls[server], procs[server])
            reads = {"hello": "/hello", "experiment list, limit 20": "/api/v1/experiments?limit=20"}
            for run in range(args.runs):
                loads.append(os.getloadavg()[0])
                for name, path in reads.items():
                    for server in servers:
                        clients = [Lean(urls[server], tokens[i]) for i in range(args.clients)]
                        cpus = {"server": CPU(procs[server].pid)}
                        r = load(get(path), clients, args.seconds, cpus)
                        results.setdefault((name, server), []).append(r)
                print(f"run {run + 1} done (load {loads[-1]:.1f})", file=sys.stderr)
        finally:
            for p in procs.values():
                p.kill()
            m.kill()
            pg.cleanup()
    print(
        f"{args.clients} clients, {args.threads} server threads, {args.seconds:.0f} s a read,"
        f" medians of {args.runs} runs, load {min(loads):.1f}-{max(loads):.1f}"
    )
    print(
        f"{'read':28} {'server':18} {'req/s':>7} {'x w.hello':>9} {'p50 ms':>7} {'p99 ms':>7}"
        f" {'CPU ms/req':>10}  other answers"
    )
    base = results[("hello", "waitress")]
    for (name, server), rs in results.items():
        ratios = [r["rps"] / b["rps"] for r, b in zip(rs, base, strict=True) if b["rps"]]
        other: dict[int, int] = {}
        for r in rs:
            for k, v in r["other"].items():
                other[k] = other.get(k, 0) + v
        print(
            f"{name:28} {server:18} {statistics.median(r['rps'] for r in rs):7.0f}"
            f" {statistics.median(ratios):9.2f} {statistics.median(r['p50'] for r in rs):7.1f}"
            f" {statistics.median(r['p99'] for r in rs):7.1f}"
            f" {statistics.median(r['cpu'].get('server', 0.0) for r in rs):10.2f}"
            + (f"  {other}" if other else "")
        )


if __name__ == "__main__":
    main()
