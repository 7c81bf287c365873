"""A local package index for boot simulations: det's dependencies for the VM image's Python,
plus a decoy ``det`` 99.0.0 (what a public index hands out for the bare name) that a boot must
never ask for.

:func:`wheelhouse` downloads the dependencies once, with the VM image's own pip (so markers and
tags are the VM's), into ``~/.cache/det-tests`` keyed by the constraints and the extras.
:class:`PackageIndex` serves a PEP 503 ``/simple/`` tree of them over HTTP and records every
path asked for.
"""

from __future__ import annotations

import fcntl
import hashlib
import http.server
import io
import os
import subprocess
import threading
import zipfile
from pathlib import Path
from typing import Any

from det.deploy.common import release
from tests.fakes.local_http import TestHTTPServer

HOST_CA = "/etc/ssl/certs/ca-certificates.crt"
# One download serves the master and agents of both clouds.
ALL_EXTRAS = "master,agent,aws,gcp"


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "det-tests"


def wheelhouse(rel: release.Release, image: str, extras: str = ALL_EXTRAS) -> Path:
    """det's dependencies (never det) for ``image``'s Python, cached by constraints + extras."""
    assert rel.path is not None
    key = hashlib.sha256(f"{rel.constraints}\n{extras}\n{image}".encode()).hexdigest()[:16]
    out = cache_dir() / f"vm-wheelhouse-{key}"
    if (out / ".complete").exists():
        return out
    # The AWS and GCP boot simulations ask for the same wheelhouse from parallel workers: one
    # builds it while the other waits (two builds in one work dir removed each other's files).
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / f"vm-wheelhouse-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (out / ".complete").exists():
            return out
        return _build_wheelhouse(rel, image, extras, out)


def _build_wheelhouse(rel: release.Release, image: str, extras: str, out: Path) -> Path:
    assert rel.path is not None
    work = out.with_name(out.name + ".tmp")
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    (work / "constraints.txt").write_text(rel.constraints)
    (work / rel.filename).write_bytes(rel.path.read_bytes())
    script = (
        "python3 -m venv /v && /v/bin/pip download -q --only-binary=:all: --dest /w/wheels "
        f"--constraint /w/constraints.txt '/w/{rel.filename}[{extras}]'"
    )
    subprocess.run(
        ["docker", "run", "--rm", "--network", "host", "-v", f"{HOST_CA}:{HOST_CA}:ro",
         "-e", f"PIP_CERT={HOST_CA}", "-e", "PIP_DISABLE_PIP_VERSION_CHECK=1",
         "-v", f"{work}:/w", image, "bash", "-c", script],
        check=True, timeout=900,
    )  # fmt: skip
    for wheel in (work / "wheels").glob("det_platform-*.whl"):
        wheel.unlink()
    subprocess.run(["rm", "-rf", str(out)], check=True)
    (work / "wheels").rename(out)
    subprocess.run(["rm", "-rf", str(work)], check=True)
    (out / ".complete").touch()
    return out


def decoy_det() -> bytes:
    """A ``det`` 99.0.0 wheel: what a public index would hand out for the bare name."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("det_poison.py", "")
        zf.writestr(
            "det-99.0.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: det\nVersion: 99.0.0\n"
        )
        zf.writestr(
            "det-99.0.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        zf.writestr("det-99.0.0.dist-info/RECORD", "")
    return buf.getvalue()


class PackageIndex:
    """``/simple/<project>/<wheel>`` for every wheel of ``wheels``, plus the decoy ``det``."""

    def __init__(self, wheels: Path, root: Path) -> None:
        for wheel in wheels.glob("*.whl"):
            project = wheel.name.split("-")[0].lower().replace("_", "-").replace(".", "-")
            (root / "simple" / project).mkdir(parents=True, exist_ok=True)
            (root / "simple" / project / wheel.name).symlink_to(wheel)
        (root / "simple" / "det").mkdir(parents=True, exist_ok=True)
        (root / "simple" / "det" / "det-99.0.0-py3-none-any.whl").write_bytes(decoy_det())
        self.requests: list[str] = []
        index = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a: Any, **kw: Any) -> None:
                super().__init__(*a, directory=str(root), **kw)

            def log_message(self, *a: Any) -> None:
                index.requests.append(self.path)

        self.server = TestHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"

    def asked_for(self, project: str) -> bool:
        return any(p.startswith(f"/simple/{project}/") for p in self.requests)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
