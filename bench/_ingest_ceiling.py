"""The ceiling of ``bench/ingest.py --ceiling``: a front that does nothing of the master's own
work but still pays its HTTP server and its database driver.

One process of it serves waitress on a socket bound with ``SO_REUSEPORT`` (several processes
on one port, as the master's fronts share theirs) with the master's thread count for cluster
fronts; or granian serves its ``app`` (``granian --interface wsgi bench._ingest_ceiling:app``,
configured by the ``DET_CEILING`` environment variable: ``DB_URL REQUESTS STEPS``). For
``POST /t/<trial>/<j>`` it reads the request's body (the bench's real report, not parsed), and
sends the cheapest statement the master has for a batch of training reports
(``trials._WRITE_BATCH``: the rows and the trial's update in one statement, no version guard,
no transaction around it) with the rows and the summary encoded when the process started, on
its thread's own autocommit connection; it answers what the master answers. No master served by
waitress and writing through these statements ingests faster than this on the same machine.

    DET_CEILING="DB_URL REQUESTS STEPS" python -m bench._ingest_ceiling PORT
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from det.master.services import trials as trial_svc

THREADS = 16  # cluster_api_threads' default: a front's worker threads


def app_for(db_url: str, rows: list[str], summary: str, steps: int) -> Any:
    local = threading.local()

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        environ["wsgi.input"].read(length)
        _, _, trial, j = environ["PATH_INFO"].split("/")
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = psycopg.connect(db_url, autocommit=True)
        k = int(j)
        conn.execute(
            trial_svc._WRITE_BATCH,
            {
                "trial": int(trial),
                "rows": rows[k],
                "summary": summary,
                "steps": k * steps + steps - 1,
                "best": None,
                "clean_run": 1,
                "clean_from": 0,
            },
        )
        body = b'{"rows":%d}' % steps
        start_response(
            "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        )
        return [body]

    return app


def from_environment() -> Any:
    """The app for ``DET_CEILING``'s database, requests a reporter and steps a request."""
    import bench.ingest as ingest

    db_url, n_requests, steps = os.environ["DET_CEILING"].split()
    ingest.STEPS = int(steps)
    rows = [ingest.batch_rows(ingest.reports(j * ingest.STEPS)) for j in range(int(n_requests))]
    return app_for(db_url, rows, ingest.SUMMARY, ingest.STEPS)


def __getattr__(name: str) -> Any:  # ``app``, built when granian imports it
    if name == "app":
        return from_environment()
    raise AttributeError(name)


def main() -> None:
    import waitress

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", int(sys.argv[1])))
    sock.listen(128)
    waitress.serve(from_environment(), sockets=[sock], threads=THREADS, _quiet=True)


if __name__ == "__main__":
    main()
