"""Deleting expired task logs while logs keep arriving (issue 27 item 3).

Fills ``task_logs`` of a migrated master database with ``--rows`` lines (default 10 million)
of ``--tasks`` ended tasks, then deletes them with the master's own code
(:func:`det.master.services.log_retention.delete_logs`: one short transaction per batch) while
a writer thread stores new lines of a live task the way the log route does
(:func:`det.master.services.task_logs.insert`, ``--ingest-batch`` lines per call). Prints the
deletion's rows per second and the writer's insert latencies before and during the deletion
(median, p99, max) and how many inserts it made: ingest that does not stall keeps its p99 near
the idle figure.

    python bench/log_retention.py                    # 10 million rows, a private pgserver
    python bench/log_retention.py --rows 200000      # a smoke run
    python bench/log_retention.py --pg-url postgresql://...   # an existing, empty database

Figures on a shared machine are rough; compare runs on one quiet machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pg import bench_database

from det.master import db
from det.master.services import log_retention, task_logs


def fill(url: str, rows: int, tasks: int) -> None:
    """``rows`` log lines spread over ``tasks`` ended tasks (one terminated allocation each),
    written by PostgreSQL itself in chunks."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO allocations (id, kind, task_id, job_id, resource_pool, slots_needed,"
            " state, token_hash, ended_at) SELECT 'old-' || i || '.1', 'COMMAND', 'old-' || i,"
            " 'job-' || i,"
            " 'default', 0, 'TERMINATED', '', now() - interval '400 days'"
            " FROM generate_series(1, %s) i",
            (tasks,),
        )
        chunk = 1_000_000
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            conn.execute(
                "INSERT INTO task_logs (task_id, allocation_id, log, level, timestamp)"
                " SELECT 'old-' || (1 + (i %% %s)), 'old-' || (1 + (i %% %s)) || '.1',"
                " 'line ' || i || ' of a finished task, long enough to look like a log line',"
                " 'INFO', now() - interval '400 days' FROM generate_series(%s, %s) i",
                (tasks, tasks, start, start + n - 1),
            )
            print(f"  filled {start + n:,} rows", flush=True)
        conn.execute("ANALYZE task_logs")


class Writer(threading.Thread):
    """Stores ``batch`` lines of a live task per call, as fast as it can, timing each call."""

    def __init__(self, url: str, batch: int) -> None:
        super().__init__(daemon=True)
        self.url, self.batch = url, batch
        self.stop = threading.Event()
        self.latencies: list[tuple[float, float]] = []  # (start, seconds)

    def run(self) -> None:
        with psycopg.connect(self.url, row_factory=dict_row) as conn:
            n = 0
            while not self.stop.is_set():
                now = dt.datetime.now(dt.UTC)
                rows = [
                    ("live", "live.1", "agent", "c1", 0, f"live line {n + k}", "INFO",
                     "stdout", None, now)
                    for k in range(self.batch)
                ]  # fmt: skip
                t0 = time.perf_counter()
                task_logs.insert(conn, rows)  # type: ignore[arg-type]
                conn.commit()
                self.latencies.append((t0, time.perf_counter() - t0))
                n += self.batch
                time.sleep(0.01)


def summary(values: list[float]) -> str:
    if not values:
        return "no inserts"
    ms = sorted(v * 1000 for v in values)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return (
        f"{len(ms)} inserts, median {statistics.median(ms):.1f} ms, p99 {p99:.1f} ms,"
        f" max {ms[-1]:.1f} ms"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--tasks", type=int, default=1000)
    p.add_argument("--batch", type=int, default=log_retention.BATCH, help="rows per delete")
    p.add_argument("--ingest-batch", type=int, default=50, help="lines per insert")
    p.add_argument("--idle-seconds", type=float, default=5.0, help="ingest alone first")
    p.add_argument("--pg-url", help="an empty PostgreSQL database (default: a private pgserver)")
    args = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="det-bench-logs-") as tmp:
        server = None
        url = args.pg_url
        if url is None:
            server, url = bench_database(Path(tmp))
        db.upgrade(url)
        print(f"filling {args.rows:,} log rows of {args.tasks} ended tasks...", flush=True)
        t0 = time.perf_counter()
        fill(url, args.rows, args.tasks)
        print(f"  in {time.perf_counter() - t0:.1f} s")

        with psycopg.connect(url, row_factory=dict_row) as conn:
            tasks = log_retention.expired_tasks(conn, 30, dt.datetime.now(dt.UTC))
        print(f"{len(tasks)} tasks expired (30 days); ingest alone for {args.idle_seconds} s")
        writer = Writer(url, args.ingest_batch)
        writer.start()
        time.sleep(args.idle_seconds)
        started = time.perf_counter()

        def connect() -> psycopg.Connection[dict]:  # type: ignore[type-arg]
            return psycopg.connect(url, row_factory=dict_row)

        removed = log_retention.delete_logs(connect, tasks, batch=args.batch)  # type: ignore[arg-type]
        took = time.perf_counter() - started
        writer.stop.set()
        writer.join()
        before = [s for t, s in writer.latencies if t < started]
        during = [s for t, s in writer.latencies if started <= t < started + took]
        print(f"deleted {removed:,} rows in {took:.1f} s: {removed / took:,.0f} rows/s"
              f" (batches of {args.batch})")  # fmt: skip
        print(f"ingest before: {summary(before)}")
        print(f"ingest during: {summary(during)}")
        with psycopg.connect(url) as conn:
            left = conn.execute("SELECT count(*) FROM task_logs WHERE task_id <> 'live'").fetchone()
        print(f"old rows left: {left[0] if left else '?'}")
        if server is not None:
            server.cleanup()


if __name__ == "__main__":
    main()
