"""A TensorBoard task (``det tensorboard start``): ``python3 -m det.exec.tensorboard``.

1. Fetches the trials' TensorBoard files from checkpoint storage (``DET_TENSORBOARD_SOURCES``:
   a JSON list of ``{"storage": checkpoint_storage, "experimentId", "trialId"}``; the files of
   trial T of experiment E are under ``<cluster id>/tensorboard/experiment/E/trial/T``, see
   ``det.core._tensorboard``) into ``<logdir>/experiment/E/trial/T`` (TensorBoard's run name),
   and again every few seconds while it runs (new and grown files).
2. Runs ``tensorboard`` (from the task image) on a loopback port with ``--path_prefix
   /proxy/<task id>``, the URL the master's proxy serves it under.
3. Once TensorBoard answers, listens on ``DET_TASK_PORT`` (where the agent and the master's
   proxy look for the service) and lets through only connections whose first request carries
   the master's credential for this task (``Authorization: token $DET_SERVICE_TOKEN``, which
   the proxy adds): TensorBoard has no authentication of its own, and the task port is on the
   agent's network.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import pathlib
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Any

from det import storage
from det.core._tensorboard import sync_path

logger = logging.getLogger("det.exec.tensorboard")

FETCH_INTERVAL = 5.0
STARTUP_TIMEOUT = 300.0
_CHUNK = 65536
_MAX_HEAD = 65536


class Fetcher:
    """Copies each source's files that are new or changed (by size) into ``logdir``."""

    def __init__(self, cluster_id: str, sources: list[dict[str, Any]], logdir: pathlib.Path):
        self.logdir = logdir
        self._sizes: dict[str, int] = {}
        self._sources = []
        for src in sources:
            cfg = src["storage"]
            manager = storage.from_config(cfg, container_path=storage.in_container_path(cfg))
            path = sync_path(cluster_id, int(src["experimentId"]), int(src["trialId"]))
            parent, _, leaf = path.rpartition("/")
            local = logdir / "experiment" / str(src["experimentId"]) / "trial" / str(src["trialId"])
            self._sources.append((manager.under(parent), leaf, local))

    def fetch(self) -> int:
        """One pass over every source; how many files were copied."""
        copied = 0
        for manager, leaf, local in self._sources:
            try:
                listing = manager.list_files(leaf)
            except Exception as e:  # storage unreachable for now: the next pass tries again
                logger.warning("cannot list %s: %s", leaf, e)
                continue
            key = str(local)
            changed = {
                rel
                for rel, size in listing.items()
                if not rel.endswith("/") and self._sizes.get(f"{key}/{rel}") != size
            }
            if not changed:
                continue
            with tempfile.TemporaryDirectory(prefix="det-tb-fetch-") as tmp:
                try:
                    manager.download(leaf, tmp, lambda rel, c=changed: rel in c)  # type: ignore[misc]
                except storage.CheckpointNotFoundError:
                    continue
                for rel in sorted(changed):
                    src = pathlib.Path(tmp, rel)
                    if not src.is_file():
                        continue
                    dst = local / rel
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    # In place (same inode): TensorBoard keeps reading a file it has open.
                    with open(src, "rb") as fin, open(dst, "wb") as fout:
                        shutil.copyfileobj(fin, fout)
                    self._sizes[f"{key}/{rel}"] = listing[rel]
                    copied += 1
        return copied


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def authorized(head: bytes, token: str) -> bool:
    """Whether a request head carries ``Authorization: token <token>`` (pure)."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"authorization":
            scheme, _, given = value.strip().partition(b" ")
            if scheme.lower() == b"token" and hmac.compare_digest(given.strip(), token.encode()):
                return True
    return False


def _refuse(conn: socket.socket) -> None:
    body = b"this TensorBoard is reached through the master's proxy\n"
    with contextlib.suppress(OSError):
        conn.sendall(
            b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\nConnection: close\r\n\r\n"
            + body
        )


def _serve_one(conn: socket.socket, upstream_port: int, token: str) -> None:
    upstream = None
    try:
        conn.settimeout(30)
        data = b""
        while b"\r\n\r\n" not in data and len(data) < _MAX_HEAD:
            chunk = conn.recv(_CHUNK)
            if not chunk:
                return
            data += chunk
        head = data.split(b"\r\n\r\n", 1)[0]
        if not authorized(head, token):
            _refuse(conn)
            return
        conn.settimeout(None)
        upstream = socket.create_connection(("127.0.0.1", upstream_port), timeout=10)
        upstream.settimeout(None)
        upstream.sendall(data)
        peers = {conn: upstream, upstream: conn}
        open_ = [conn, upstream]
        while open_:
            ready, _, _ = select.select(open_, [], [])
            for s in ready:
                try:
                    chunk = s.recv(_CHUNK)
                except OSError:
                    chunk = b""
                if not chunk:
                    if s is upstream:
                        return
                    open_.remove(s)
                    with contextlib.suppress(OSError):
                        upstream.shutdown(socket.SHUT_WR)
                    continue
                peers[s].sendall(chunk)
    except OSError:
        return
    finally:
        for sock in (upstream, conn):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()


def gate(server: socket.socket, upstream_port: int, token: str) -> None:
    """Serves ``server`` for ever: authorised connections go on to TensorBoard."""
    while True:
        conn, _ = server.accept()
        threading.Thread(target=_serve_one, args=(conn, upstream_port, token), daemon=True).start()


def _wait_responsive(proc: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"det tensorboard: tensorboard exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"det tensorboard: tensorboard did not answer within {STARTUP_TIMEOUT:.0f} s")


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    task_id = os.environ["DET_TASK_ID"]
    port = int(os.environ["DET_TASK_PORT"])
    token = os.environ["DET_SERVICE_TOKEN"]
    sources = json.loads(os.environ.get("DET_TENSORBOARD_SOURCES") or "[]")
    extra_args = json.loads(os.environ.get("DET_TENSORBOARD_ARGS") or "[]")
    binary = shutil.which("tensorboard")
    if binary is None:
        print(
            "det tensorboard: this task image has no 'tensorboard' program; use an image with"
            " the tensorboard package (det's default det-task image has it)",
            file=sys.stderr,
        )
        return 1
    logdir = pathlib.Path(tempfile.mkdtemp(prefix="det-tensorboard-"))
    fetcher = Fetcher(os.environ["DET_CLUSTER_ID"], sources, logdir)
    print(f"det tensorboard: fetched {fetcher.fetch()} files of {len(sources)} trials", flush=True)

    inner = free_port()
    prefix = f"/proxy/{task_id}"
    proc = subprocess.Popen(
        [
            binary,
            f"--logdir={logdir}",
            "--host=127.0.0.1",
            f"--port={inner}",
            f"--path_prefix={prefix}",
            "--load_fast=false",
            *[str(a) for a in extra_args],
        ]
    )

    def refresh() -> None:
        while proc.poll() is None:
            time.sleep(FETCH_INTERVAL)
            try:
                n = fetcher.fetch()
            except Exception as e:
                logger.warning("fetching TensorBoard files failed: %s", e)
                continue
            if n:
                print(f"det tensorboard: fetched {n} new or changed files", flush=True)

    try:
        _wait_responsive(proc, f"http://127.0.0.1:{inner}{prefix}/")
        threading.Thread(target=refresh, daemon=True, name="det-tb-fetch").start()
        server = socket.create_server(("0.0.0.0", port))
        print(f"det tensorboard: serving on port {port}", flush=True)
        threading.Thread(target=gate, args=(server, inner, token), daemon=True).start()
        return proc.wait()
    finally:
        if proc.poll() is None:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)


if __name__ == "__main__":
    sys.exit(main())
