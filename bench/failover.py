"""Leader failover: two masters on one PostgreSQL, the leader killed with ``kill -9``.

Each run starts a leader and a standby (``det-master`` with the defaults but ``tick_seconds``)
on a private PostgreSQL (``pgserver``, or ``--pg-url``), waits until the first leads, kills it
(SIGKILL) and measures, from the kill:

* **lock**: the first moment PostgreSQL shows the leader lock held by the standby's session
  (``pg_locks``, read every 2 ms by this script);
* **leads**: the standby's log saying it leads (read every 10 ms).

``--reference-python PY`` also runs masters with another interpreter (e.g. the virtual
environment of an earlier checkout), run for run interleaved with this one, so both figures
come from the same minutes of a shared machine; medians are printed beside each other.

    .venv/bin/python bench/failover.py [--runs 5] [--reference-python OTHER/.venv/bin/python]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import requests
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._pg import bench_database  # noqa: E402
from det.master.db import LEADER_LOCK_KEY  # noqa: E402
from tests.integration.conftest import free_port  # noqa: E402

GOAL_SECONDS = 0.3
LEADS = "leads the control loops"
HOLDER = (
    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
    " AND ((classid::bigint << 32) | objid::bigint) = %s"
)


@contextlib.contextmanager
def master(python: str, tmp: Path, name: str, pg_url: str, tick: float) -> Iterator[Any]:
    """A det-master run by ``python``; yields (process, log file)."""
    data = tmp / name
    data.mkdir()
    port = free_port()
    config = {
        "port": port,
        "bind_address": "127.0.0.1",
        "data_dir": str(data),
        "db": {"url": pg_url},
        "security": {"initial_user_password": "Bench-admin-pw1"},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp / "checkpoints")},
        "tick_seconds": tick,
    }
    (data / "master.yaml").write_text(yaml.safe_dump(config))
    log = data / "master.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [python, "-m", "det.master", "--config-file", str(data / "master.yaml")],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited {proc.returncode}:\n{log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not come up:\n{log.read_text()[-2000:]}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"http://127.0.0.1:{port}/info", timeout=2).ok:
                    break
            time.sleep(0.1)
        yield proc, log
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)


def wait_for(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def one_run(python: str, pg_url: str, tick: float) -> tuple[float, float]:
    """Seconds from the leader's SIGKILL to (the standby holds the lock, the standby says it
    leads)."""
    with (
        tempfile.TemporaryDirectory(prefix="det-bench-failover-") as tmp_s,
        psycopg.connect(pg_url, autocommit=True) as watch,
    ):
        tmp = Path(tmp_s)
        (tmp / "checkpoints").mkdir()
        with master(python, tmp, "leader", pg_url, tick) as (leader, leader_log):
            wait_for(lambda: LEADS in leader_log.read_text(), 60, "the leader to lead")
            with master(python, tmp, "standby", pg_url, tick) as (_standby, standby_log):
                row = watch.execute(HOLDER, (LEADER_LOCK_KEY,)).fetchone()
                assert row is not None, "nobody holds the leader lock"
                old = int(row[0])
                time.sleep(1.0)  # the standby settles into its wait
                assert LEADS not in standby_log.read_text()
                t0 = time.monotonic()
                leader.send_signal(signal.SIGKILL)
                lock_at = leads_at = None
                next_log = t0
                while lock_at is None or leads_at is None:
                    now = time.monotonic()
                    if now - t0 > 60:
                        raise RuntimeError("the standby did not take over within 60 s")
                    if lock_at is None:
                        row = watch.execute(HOLDER, (LEADER_LOCK_KEY,)).fetchone()
                        if row is not None and int(row[0]) != old:
                            lock_at = now - t0
                    if leads_at is None and now >= next_log:
                        next_log = now + 0.01
                        if LEADS in standby_log.read_text():
                            leads_at = time.monotonic() - t0
                    time.sleep(0.002)
                leader.wait(30)
                return lock_at, leads_at


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--pg-url", help="PostgreSQL database to use (default: a private pgserver)")
    p.add_argument("--tick-seconds", type=float, default=0.5)
    p.add_argument("--reference-python", help="also run masters with this interpreter")
    args = p.parse_args()

    kinds = [("this checkout", sys.executable)]
    if args.reference_python:
        kinds.append(("reference", args.reference_python))
    with tempfile.TemporaryDirectory(prefix="det-bench-failover-pg-") as pg_tmp:
        pg_url = args.pg_url
        server = None
        if not pg_url:
            server, pg_url = bench_database(Path(pg_tmp))
        try:
            results: dict[str, list[tuple[float, float]]] = {k: [] for k, _ in kinds}
            for i in range(args.runs):
                for kind, python in kinds:
                    lock, leads = one_run(python, pg_url, args.tick_seconds)
                    results[kind].append((lock, leads))
                    print(f"run {i + 1} {kind:>13}: lock {lock:6.3f} s, leads {leads:6.3f} s")
        finally:
            if server is not None:
                server.cleanup()
    for kind, rows in results.items():
        lock = statistics.median(r[0] for r in rows)
        leads = statistics.median(r[1] for r in rows)
        verdict = "meets" if leads <= GOAL_SECONDS else "misses"
        print(
            f"median of {len(rows)} ({kind}): lock {lock:.3f} s, leads {leads:.3f} s"
            f" ({verdict} the goal of {GOAL_SECONDS} s)"
        )


if __name__ == "__main__":
    main()
