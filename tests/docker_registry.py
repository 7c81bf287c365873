"""A private image registry for tests: Debian's ``docker-registry`` (Docker's registry v2) on a
local port with htpasswd basic auth (``htpasswd`` from ``apache2-utils``).

Docker allows plain HTTP to registries on 127.0.0.0/8, so the machine's engine pushes to and
pulls from it without TLS or daemon configuration.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests import stall_clock


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def private_registry(tmp: Path, users: dict[str, str], bind: str = "127.0.0.1") -> Iterator[str]:
    """Runs a registry that accepts only ``users`` (name → password); yields ``127.0.0.1:PORT``.
    ``bind``: the address it listens on (``0.0.0.0``: also reached from containers on a bridge,
    at its gateway's address, PORT the same)."""
    for tool in ("docker-registry", "htpasswd"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} missing: apt-get install docker-registry apache2-utils")
    tmp.mkdir(parents=True, exist_ok=True)
    lines = [
        subprocess.run(
            ["htpasswd", "-Bbn", name, password], capture_output=True, text=True, check=True
        ).stdout.strip()
        for name, password in users.items()
    ]
    (tmp / "htpasswd").write_text("\n".join(lines) + "\n")
    port = _free_port()
    (tmp / "config.yml").write_text(
        "version: 0.1\n"
        "log: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {tmp / 'data'}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: '{bind}:{port}'}}\n"
        f"auth: {{htpasswd: {{realm: det-test, path: {tmp / 'htpasswd'}}}}}\n"
    )
    log = open(tmp / "registry.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(tmp / "config.yml")], stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "registry did not start: " + (tmp / "registry.log").read_text()
                    ) from None
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        stall_clock.wait_process(proc, 10)
        log.close()
