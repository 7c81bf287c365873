"""The master's event loop against waitress's, with many idle connections open (issue 43).

A server process runs waitress, as the master's front does (``connection_limit`` high, 32
threads), serving a WSGI hello, with one of the two loops: ``poll`` (waitress's own: every open
connection asked ``readable()``/``writable()`` at every wake-up) or ``readiness``
(:mod:`det.master.evloop`: one epoll set, a connection asked only when it changed). The bench
opens ``--idle`` keep-alive connections that each make one request and then stay open (as a
fleet's agents and trials hold theirs between calls), then ``--clients`` threads call the hello
on their own keep-alive connections for ``--seconds``. Loops alternate over ``--runs`` rounds
(a loaded machine disturbs both alike). Prints, per loop and idle count: requests a second,
p50/p99, and the server's CPU per request (its process's user+system time over the window);
medians of the rounds.

    .venv/bin/python bench/event_loop.py [--idle 0,1000,3000] [--runs 3] [--seconds 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SERVER = """
import sys
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from det.master import evloop

def app(environ, start_response):
    body = b'{"hello": "world"}'
    start_response("200 OK", [("Content-Type", "application/json"),
                              ("Content-Length", str(len(body)))])
    return [body]

loop = sys.argv[1]
kw = dict(host="127.0.0.1", port=0, threads=32, connection_limit=100000, channel_timeout=600)
if loop == "readiness":
    channel = type("C", (evloop.TrackedChannel, HTTPChannel), {})
    cls = type("S", (evloop.ReadinessServer, TcpWSGIServer), {"channel_class": channel})
    srv = cls(app, map=evloop.ReadinessMap(), **kw)
else:
    srv = TcpWSGIServer(app, asyncore_use_poll=True, **kw)
print(srv.effective_port, flush=True)
srv.run()
"""

REQUEST = b"GET /hello HTTP/1.1\r\nHost: bench\r\n\r\n"


def call(sock: socket.socket) -> None:
    """One keep-alive request and its whole answer."""
    sock.sendall(REQUEST)
    data = b""
    while True:
        data += sock.recv(65536)
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            if len(body) >= length:
                return


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    loop: str, idle: int, clients: int, seconds: float
) -> tuple[float, float, float, float]:
    """(requests/s, p50 ms, p99 ms, server CPU ms per request)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, loop], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        held = []
        for _ in range(idle):
            s = socket.create_connection(("127.0.0.1", port))
            call(s)
            held.append(s)
        latencies: list[float] = []
        lock = threading.Lock()
        stop = time.monotonic() + seconds

        def client() -> None:
            s = socket.create_connection(("127.0.0.1", port))
            mine = []
            while time.monotonic() < stop:
                t = time.perf_counter()
                call(s)
                mine.append(time.perf_counter() - t)
            s.close()
            with lock:
                latencies.extend(mine)

        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        threads = [threading.Thread(target=client) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        cpu, wall = cpu_seconds(proc.pid) - cpu0, time.monotonic() - t0
        for s in held:
            s.close()
        n = len(latencies)
        latencies.sort()
        return (
            n / wall,
            latencies[n // 2] * 1000,
            latencies[min(n - 1, int(n * 0.99))] * 1000,
            cpu / n * 1000,
        )
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--idle", default="0,1000,3000")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    idles = [int(x) for x in args.idle.split(",")]
    need = max(idles) + args.clients + 100
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, need), hard))
    results: dict[tuple[str, int], list[tuple[float, float, float, float]]] = {}
    for run in range(args.runs):
        for idle in idles:
            for loop in ("poll", "readiness") if run % 2 == 0 else ("readiness", "poll"):
                results.setdefault((loop, idle), []).append(
                    measure(loop, idle, args.clients, args.seconds)
                )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}; medians of {args.runs} runs")
    print(f"{'loop':<10} {'idle':>6} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'CPU ms/req':>10}")
    for idle in idles:
        for loop in ("poll", "readiness"):
            rows = results[(loop, idle)]
            med = [statistics.median(r[i] for r in rows) for i in range(4)]
            print(
                f"{loop:<10} {idle:>6} {med[0]:>8.0f} {med[1]:>7.2f} {med[2]:>7.2f} {med[3]:>10.3f}"
            )


if __name__ == "__main__":
    main()
