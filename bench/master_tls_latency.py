"""``GET /info`` latency of a real ``det-master`` over HTTP and over HTTPS (security.tls).

Starts one master (embedded PostgreSQL in a temporary directory, or ``--db-url``) per round,
alternating plain and TLS with a self-signed certificate, and times ``/info`` from one client
thread: on one kept-alive connection (the cost of encryption) and on a new connection per
request (adds the TCP and TLS handshakes). Prints the median and p90 in milliseconds.

    .venv/bin/python bench/master_tls_latency.py [--requests 300] [--rounds 2] [--db-url URL]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import requests
import yaml

from det.common import tls


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(
    tmp: Path, db_url: str | None, cert: tuple[Path, Path] | None
) -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    config: dict[str, object] = {
        "port": port,
        "bind_address": "127.0.0.1",
        "data_dir": str(tmp / "data"),
        "security": {"initial_user_password": "Bench-pw-1"},
        "log": {"level": "warning"},
    }
    if db_url:
        config["db"] = {"url": db_url}
    if cert:
        config["security"] = {
            "initial_user_password": "Bench-pw-1",
            "tls": {"cert": str(cert[0]), "key": str(cert[1])},
        }
    path = tmp / "master.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.Popen(
        [sys.executable, "-m", "det.master", "--config-file", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"{'https' if cert else 'http'}://127.0.0.1:{port}"
    s = session(cert)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if s.get(url + "/info", timeout=1).ok:
                return url, proc
        except requests.RequestException:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the master did not come up")


def session(cert: tuple[Path, Path] | None) -> requests.Session:
    return tls.session(tls.load(str(cert[0]) if cert else None, None))


def timings(url: str, cert: tuple[Path, Path] | None, n: int, keep_alive: bool) -> list[float]:
    out = []
    s = session(cert)
    for _ in range(n):
        if not keep_alive:
            s = session(cert)
        t0 = time.perf_counter()
        r = s.get(url + "/info", timeout=10)
        out.append((time.perf_counter() - t0) * 1000)
        assert r.ok
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--db-url")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="det-tls-bench-") as d:
        tmp = Path(d)
        cert, key = tmp / "c.pem", tmp / "k.pem"
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-keyout",
                str(key),
                "-out",
                str(cert),
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ],
            check=True,
            capture_output=True,
        )
        results: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for name, c in (("http", None), ("https", (cert, key))):
                url, proc = start(tmp, args.db_url, c)
                try:
                    timings(url, c, 20, True)  # warm-up
                    for keep in (True, False):
                        label = f"{name} {'kept-alive' if keep else 'new connection'}"
                        results.setdefault(label, []).extend(timings(url, c, args.requests, keep))
                finally:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=30)
        print(f"GET /info, {args.requests} x {args.rounds} rounds each, one client thread (ms)")
        for label, values in results.items():
            values.sort()
            p90 = values[int(len(values) * 0.9)]
            print(f"  {label:28s} median {statistics.median(values):6.2f}  p90 {p90:6.2f}")


if __name__ == "__main__":
    os.environ.pop("REQUESTS_CA_BUNDLE", None)
    main()
