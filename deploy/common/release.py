"""The det that ``det deploy`` ships to its VMs: a wheel of the running version and a
constraints file pinning every dependency as installed here.

Nothing is ever installed by name from a package index: det's distribution is
``det-platform`` (the bare name ``det`` there belongs to another project). ``up`` uploads the wheel and the constraints into the cluster's bucket
(bucket objects of the stack, so a later ``up`` replaces them); the VMs download both with their
instance role, check the wheel's sha256 (rendered into their user data) and run
``pip install --constraint constraints.txt det_platform-X.whl[extras]``: only the dependencies come from
an index.

The constraints are for the VMs, not for this machine: Ubuntu 24.04's Python 3.12 on x86_64
(glibc 2.39). :func:`resolve_for_vms` asks pip to resolve det's extras for that target
(``--python-version 3.12 --platform manylinux_2_39_x86_64 ... --only-binary=:all:``, a dry run
that installs nothing) against the index the VMs use, first with this environment's versions as
constraints, so a deployer on 3.12 ships what it tested. When those cannot all be installed
there (a deployer on 3.13 or in conda may have versions with no wheel for 3.12), the newest
versions that can are pinned instead and ``up`` names the ones that changed; when the index
cannot be reached, this environment's versions are kept, with a warning.

Where the wheel comes from: a source checkout (an editable install, or running from the
repository) is built with ``pip wheel`` and a fixed ``SOURCE_DATE_EPOCH``, so the same code
gives the same bytes and hash (no spurious replacement on ``up``); an installed,
non-editable det is packed back into a wheel from its ``RECORD``. ``pip wheel`` builds with the
setuptools installed here when it can make wheels (70.1 and newer, or with the ``wheel``
package: offline), else in an isolated build environment from the package index pip is set up
for (a fresh ``python3 -m venv`` on 3.11 has setuptools 65 without ``wheel``).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import csv
import dataclasses
import functools
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

from det.common.distribution import DISTRIBUTION, WHEEL_PREFIX
from det.deploy.common.errors import DeployError

logger = logging.getLogger(__name__)

# Keys of the release objects in the cluster's bucket.
OBJECT_PREFIX = "det-release"
CONSTRAINTS_NAME = "constraints.txt"
# Not pinned: pip's own tooling (the VM's venv brings its own).
_UNPINNED = frozenset({DISTRIBUTION, "det", "pip", "setuptools", "wheel", "distribute"})
_FIXED_EPOCH = "315532800"  # 1980-01-01: zip's earliest time


@dataclasses.dataclass(frozen=True)
class Release:
    """A wheel and its constraints. ``path`` is None for a placeholder (dry-run: not built)."""

    filename: str
    sha256: str
    constraints: str
    path: Path | None

    @property
    def wheel_key(self) -> str:
        return f"{OBJECT_PREFIX}/{self.filename}"

    @property
    def constraints_key(self) -> str:
        return f"{OBJECT_PREFIX}/{CONSTRAINTS_NAME}"


def _normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def constraints_text() -> str:
    """``name==version`` for every distribution installed from an index in this environment."""
    pins: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if not name or _normalize(name) in _UNPINNED:
            continue
        if dist.read_text("direct_url.json"):  # a local path or VCS checkout: not on an index
            continue
        if "+" in dist.version:  # a local version label (e.g. +cpu): not on the public index
            continue
        pins.setdefault(_normalize(name), dist.version)
    lines = [f"{name}=={version}" for name, version in sorted(pins.items())]
    header = f"# Dependencies of det {det_version()} as installed where `det deploy` ran.\n"
    return header + "\n".join(lines) + "\n"


# The VMs' Python (Ubuntu 24.04's python3) and platform (glibc 2.39, x86_64).
VM_PYTHON = "3.12"
VM_GLIBC = (2, 39)
VM_EXTRAS = "master,agent,aws,gcp"


def vm_platforms() -> list[str]:
    """pip ``--platform`` tags the VMs accept: pip does not expand ``manylinux_2_39`` to the older
    manylinux tags by itself, so every one is named (PEP 600; manylinux2014 is 2_17)."""
    major, minor = VM_GLIBC
    return [f"manylinux_{major}_{m}_x86_64" for m in range(minor, 4, -1)] + [
        "manylinux2014_x86_64",
        "manylinux2010_x86_64",
        "manylinux1_x86_64",
    ]


def _pins(text: str) -> dict[str, str]:
    return {
        _normalize(name): version
        for name, _, version in (
            line.strip().partition("==") for line in text.splitlines() if "==" in line
        )
    }


def resolve_for_vms(
    wheel: Path,
    local: str,
    *,
    index_url: str | None = None,
    find_links: Path | None = None,
    python: str = sys.executable,
) -> tuple[str, str | None]:
    """(constraints for the VMs, a warning or None): pip's resolution of ``wheel[VM_EXTRAS]``
    for :data:`VM_PYTHON` on :func:`vm_platforms`, first constrained by ``local`` (this
    environment's pins), then free. ``find_links`` (tests): a directory of wheels, no index."""
    base = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    base += ["--disable-pip-version-check", "--only-binary=:all:", "--implementation", "cp"]
    base += ["--python-version", VM_PYTHON, "--abi", "cp" + VM_PYTHON.replace(".", "")]
    for platform in vm_platforms():
        base += ["--platform", platform]
    if find_links is not None:
        base += ["--no-index", "--find-links", str(find_links)]
    elif index_url:
        base += ["--index-url", index_url]
    with tempfile.TemporaryDirectory(prefix="det-resolve-") as tmp:
        (Path(tmp) / "local.txt").write_text(local)
        errors = []
        for constrain in (True, False):
            args = [*base, "--target", str(Path(tmp) / "t"), "--report", str(Path(tmp) / "r.json")]
            if constrain:
                args += ["--constraint", str(Path(tmp) / "local.txt")]
            done = subprocess.run(
                [*args, f"{wheel}[{VM_EXTRAS}]"], capture_output=True, text=True, timeout=900
            )
            if done.returncode == 0:
                report = json.loads((Path(tmp) / "r.json").read_text())
                resolved = {
                    _normalize(i["metadata"]["name"]): i["metadata"]["version"]
                    for i in report["install"]
                    if _normalize(i["metadata"]["name"]) not in _UNPINNED
                }
                return _vm_constraints(resolved), (None if constrain else _changed(local, resolved))
            errors.append(pip_error(done.stderr))
    warning = (
        f"cannot resolve det's dependencies for the VMs' Python {VM_PYTHON} ({errors[-1]}): "
        "the VMs get this environment's versions, which may lack wheels there"
    )
    return local, warning


def _vm_constraints(resolved: dict[str, str]) -> str:
    header = (
        f"# Dependencies of det {det_version()} for the VMs' Python {VM_PYTHON} "
        "(manylinux x86_64), resolved where `det deploy` ran.\n"
    )
    return header + "".join(f"{n}=={v}\n" for n, v in sorted(resolved.items()))


def _changed(local: str, resolved: dict[str, str]) -> str:
    here = _pins(local)
    moved = [f"{n} {here[n]} -> {v}" for n, v in sorted(resolved.items()) if here.get(n, v) != v]
    return (
        f"this environment's versions cannot all be installed on the VMs' Python {VM_PYTHON}: "
        f"the newest that can are pinned instead ({', '.join(moved) or 'no version changed'})"
    )


def for_vms(rel: Release, index_url: str | None = None) -> Release:
    """``rel`` with :func:`resolve_for_vms`'s constraints; a warning is logged."""
    if rel.path is None:
        return rel
    constraints, warning = resolve_for_vms(rel.path, rel.constraints, index_url=index_url)
    if warning:
        logger.warning("%s", warning)
    return dataclasses.replace(rel, constraints=constraints)


def det_version() -> str:
    return importlib.metadata.version(DISTRIBUTION)


def source_tree() -> Path | None:
    """The repository this det runs from (a directory with det's pyproject.toml), if any."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        pyproject = parent / "pyproject.toml"
        if pyproject.is_file() and f'name = "{DISTRIBUTION}"' in pyproject.read_text(
            encoding="utf-8"
        ):
            return parent
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def setuptools_cannot_build(setuptools_version: str | None, has_wheel: bool) -> str | None:
    """None when a setuptools of this version (None: not installed) builds a wheel without an
    index; else why not: setuptools has ``bdist_wheel`` itself from 70.1, before that only with
    the ``wheel`` package (det's build needs 69 or newer)."""
    if setuptools_version is None:
        return "this environment has no setuptools"
    numbers = tuple(int(p) for p in setuptools_version.split(".")[:2] if p.isdigit())
    if numbers >= (70, 1) or (numbers >= (69,) and has_wheel):
        return None
    why = "" if has_wheel else " without the wheel package"
    return f"this environment's setuptools {setuptools_version}{why} cannot build det's wheel"


def _here_cannot_build() -> str | None:
    try:
        installed: str | None = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        installed = None
    return setuptools_cannot_build(installed, importlib.util.find_spec("wheel") is not None)


def pip_error(stderr: str) -> str:
    """The line of pip's output that says what went wrong: the build backend's own ``error:``
    line if there is one (``invalid command 'bdist_wheel'``), else pip's last ``ERROR:``, never
    its closing hints."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    own = [line for line in lines if line.startswith("error:") and "subprocess-exited" not in line]
    pips = [line for line in lines if line.startswith("ERROR:")]
    rest = [line for line in lines if not line.startswith(("hint:", "note:", "WARNING:", "╰"))]
    return (own[:1] or pips[-1:] or rest[-1:] or ["no wheel written"])[0]


@contextlib.contextmanager
def _building_in(tree: Path) -> Iterator[None]:
    """One wheel build at a time in ``tree``: setuptools stages every build in the tree's own
    build/lib, which the next build empties first (below), so two builds at once (two ``up``
    in one checkout, or two test processes) would delete each other's files mid-copy."""
    try:
        import fcntl  # POSIX only: elsewhere the builds go unlocked
    except ImportError:  # not POSIX: no lock to take
        yield
        return
    (tree / "build").mkdir(exist_ok=True)
    with open(tree / "build" / ".det-wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build_from_source(tree: Path, out: Path) -> Path:
    env = {**os.environ, "SOURCE_DATE_EPOCH": _FIXED_EPOCH}
    cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out)]
    missing = _here_cannot_build()
    if missing is None:
        cmd.append("--no-build-isolation")  # build offline with what is installed
    with _building_in(tree):
        # setuptools stages the package in the tree's build/lib and never removes what the
        # source no longer has: a renamed or deleted module or migration would ship in the wheel.
        shutil.rmtree(tree / "build" / "lib", ignore_errors=True)
        done = subprocess.run([*cmd, str(tree)], capture_output=True, text=True, env=env)
    wheels = sorted(out.glob(f"{WHEEL_PREFIX}-*.whl"))
    if done.returncode != 0 or not wheels:
        last = pip_error(done.stderr)
        why = (
            f"{missing}, and pip's isolated build (setuptools and wheel from the package index) "
            f"failed: {last}; `pip install 'setuptools>=70.1'` here fixes it"
            if missing
            else last
        )
        raise DeployError(f"cannot build det's wheel from {tree}: {why}")
    return wheels[0]


def _repack_installed(out: Path) -> Path:
    """A wheel from the files of the installed det distribution (its RECORD)."""
    dist = importlib.metadata.distribution(DISTRIBUTION)
    files = [f for f in dist.files or () if not str(f).startswith("..")]
    if not files:
        raise DeployError("the installed det has no file list (RECORD): cannot ship it")
    wheel = out / f"{WHEEL_PREFIX}-{dist.version}-py3-none-any.whl"
    record_name = next((str(f) for f in files if str(f).endswith(".dist-info/RECORD")), None)
    if record_name is None:
        raise DeployError("the installed det has no RECORD: cannot ship it")
    rows: list[list[str]] = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in sorted(files, key=str):
            name = str(f)
            if name == record_name or "__pycache__" in name or name.endswith(".pyc"):
                continue
            data = Path(str(f.locate())).read_bytes()
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, data, zipfile.ZIP_DEFLATED)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            rows.append([name, f"sha256={digest.decode()}", str(len(data))])
        rows.append([record_name, "", ""])
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        info = zipfile.ZipInfo(record_name, date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        zf.writestr(info, buf.getvalue())
    return wheel


@functools.lru_cache(maxsize=1)
def build(cache_dir: Path | None = None) -> Release:
    """Build (or pack) the running det once per process. Without ``cache_dir`` the wheel goes to
    a temporary directory removed when the process exits (``up`` uploads it before)."""
    if cache_dir is None:
        out = Path(tempfile.mkdtemp(prefix="det-release-"))
        atexit.register(shutil.rmtree, out, ignore_errors=True)
    else:
        out = cache_dir
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob(f"{WHEEL_PREFIX}-*.whl"):
        old.unlink()
    tree = source_tree()
    wheel = build_from_source(tree, out) if tree else _repack_installed(out)
    return Release(
        filename=wheel.name, sha256=_sha256(wheel), constraints=constraints_text(), path=wheel
    )


def placeholder() -> Release:
    """What a dry-run shows: the release ``up`` would build, without building it."""
    return Release(
        filename=f"{WHEEL_PREFIX}-{det_version()}-py3-none-any.whl",
        sha256="0" * 64,
        constraints=f"# dependencies of det {det_version()} (written at up)\n",
        path=None,
    )
