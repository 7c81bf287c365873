"""Shared by the checkpoint storage tests: sample checkpoints and a GCS emulator process.

``gcs_emulator(workdir)`` runs gcp-storage-emulator in memory on a free port (its output in
``workdir/emulator.log``) and yields its URL once it answers; point ``STORAGE_EMULATOR_HOST`` at
it. S3 tests use ``tests.fakes.moto_server.MotoServer`` the same way.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import requests

from tests import stall_clock
from tests.fakes.moto_server import free_port

BIG = 50 * 1024 * 1024


def make_checkpoint(root: Path) -> dict[str, str]:
    """Nested folders, an empty folder and a 50 MB file; returns relative path → sha256."""
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "a" / "small.txt").write_text("hello")
    (root / "a" / "b" / "c" / "weights.bin").write_bytes(os.urandom(3000))
    with (root / "big.bin").open("wb") as f:
        for _ in range(BIG // (1024 * 1024)):
            f.write(os.urandom(1024 * 1024))
    return digests(root)


def digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


SECRET = b"a file outside the checkpoint"


def linked_source(tmp_path: Path) -> Path:
    """A checkpoint directory with a link to a file inside it and links that leave it."""
    (tmp_path / "secret").write_bytes(SECRET)
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.pt").write_bytes(b"weights")
    os.symlink("model.pt", src / "latest.pt")
    os.symlink(str(tmp_path / "secret"), src / "leak")
    os.symlink("../secret", src / "leak-relative")
    os.symlink(str(tmp_path), src / "dir-out")
    return src


@contextlib.contextmanager
def gcs_emulator(workdir: Path, timeout: float = 30.0) -> Iterator[str]:
    port = free_port()
    log = workdir / "emulator.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            # by module, not by its script: a venv may see the package through another's path
            [
                sys.executable,
                "-m",
                "gcp_storage_emulator",
                "start",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--in-memory",
            ],
            stdout=out,
            stderr=out,
            cwd=workdir,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                requests.get(f"{url}/storage/v1/b", timeout=1)
                break
            except requests.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"emulator did not start: {log.read_text()}") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        stall_clock.wait_process(proc, 10)
