"""Checkpoint upload/download throughput of the harness storage backends, and metrics reporting
rate against the harness tests' stand-in master.

Storage: a checkpoint of one 50 MB file plus 200 small files (4 KB), uploaded and downloaded
through ``det.storage`` to shared_fs (a local directory), S3 (moto server) and GCS
(gcp-storage-emulator). Metrics: ``report_training_metrics`` calls per second seen by the
training thread, and the time to flush them all on close. Prints each run and the median.

    .venv/bin/python bench/harness_storage.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import requests

from det import storage
from tests.unit.harness.fake_master import FakeMaster

MB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_checkpoint(root: Path) -> int:
    (root / "small").mkdir(parents=True)
    (root / "big.bin").write_bytes(os.urandom(50 * MB))
    for i in range(200):
        (root / "small" / f"f{i}.bin").write_bytes(os.urandom(4096))
    return 50 * MB + 200 * 4096


def wait_http(url: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            requests.get(url, timeout=1)
            return
        except requests.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def start(cmd: list[str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=out, cwd=cwd)


def bench_backend(
    name: str, cfg: dict[str, str], src: Path, size: int, runs: int, tmp: Path
) -> None:
    mgr = storage.from_config(cfg)
    ups, downs = [], []
    for i in range(runs):
        sid = f"bench-{i}"
        t0 = time.perf_counter()
        mgr.upload(src, sid)
        t1 = time.perf_counter()
        mgr.download(sid, tmp / f"{name}-dl-{i}")
        t2 = time.perf_counter()
        mgr.delete(sid)
        ups.append(size / MB / (t1 - t0))
        downs.append(size / MB / (t2 - t1))
    print(
        f"{name:10s} upload MB/s {[round(u) for u in ups]} median {statistics.median(ups):.0f}; "
        f"download MB/s {[round(d) for d in downs]} median {statistics.median(downs):.0f}"
    )


def bench_metrics(runs: int) -> None:
    import json

    import det

    rates, flushes = [], []
    for _ in range(runs):
        m = FakeMaster()
        m.start()
        env = m.task_env(
            config={"checkpoint_storage": {"type": "directory", "container_path": "/tmp"}}
        )
        old = dict(os.environ)
        os.environ.update(env)
        try:
            ctx = det.core.init()
            ctx.start()
            n = 500
            t0 = time.perf_counter()
            for step in range(n):
                ctx.train.report_training_metrics(step, {"loss": 1.0 / (step + 1)})
            t1 = time.perf_counter()
            ctx.close()
            t2 = time.perf_counter()
        finally:
            os.environ.clear()
            os.environ.update(old)
            m.stop()
        assert len(m.requests_to("/metrics")) == n, json.dumps(len(m.state.records))
        rates.append(n / (t1 - t0))
        flushes.append(t2 - t0)
    print(
        f"metrics    report() calls/s median {statistics.median(rates):.0f}; "
        f"500 reports delivered in median {statistics.median(flushes):.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    import logging

    logging.disable(logging.INFO)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        src = tmp / "src"
        size = make_checkpoint(src)
        bench_backend(
            "shared_fs",
            {"type": "shared_fs", "host_path": str(tmp / "fs")},
            src,
            size,
            args.runs,
            tmp,
        )

        procs: list[subprocess.Popen[bytes]] = []
        try:
            bin_dir = Path(sys.executable).parent
            s3_port, gcs_port = free_port(), free_port()
            procs.append(
                start(
                    [str(bin_dir / "moto_server"), "-H", "127.0.0.1", "-p", str(s3_port)],
                    tmp / "moto.log",
                    tmp,
                )
            )
            procs.append(
                start(
                    [
                        str(bin_dir / "gcp-storage-emulator"),
                        "start",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(gcs_port),
                        "--in-memory",
                    ],
                    tmp / "gcs.log",
                    tmp,
                )
            )
            s3_url, gcs_url = f"http://127.0.0.1:{s3_port}", f"http://127.0.0.1:{gcs_port}"
            wait_http(s3_url + "/moto-api/")
            wait_http(gcs_url + "/storage/v1/b")
            import boto3

            boto3.client(
                "s3",
                endpoint_url=s3_url,
                aws_access_key_id="k",
                aws_secret_access_key="s",
                region_name="us-east-1",
            ).create_bucket(Bucket="bench-ckpts")
            s3_cfg = {
                "type": "s3",
                "bucket": "bench-ckpts",
                "endpoint_url": s3_url,
                "access_key": "k",
                "secret_key": "s",
            }
            bench_backend("s3 (moto)", s3_cfg, src, size, args.runs, tmp)

            os.environ["STORAGE_EMULATOR_HOST"] = gcs_url
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import storage as gcs

            gcs.Client(project="bench", credentials=AnonymousCredentials()).create_bucket(
                "bench-ckpts"
            )
            bench_backend(
                "gcs (emu)", {"type": "gcs", "bucket": "bench-ckpts"}, src, size, args.runs, tmp
            )
        finally:
            for p in procs:
                p.terminate()
                p.wait(timeout=10)
    bench_metrics(args.runs)


if __name__ == "__main__":
    main()
